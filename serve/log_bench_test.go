package serve

import (
	"errors"
	"strconv"
	"testing"

	"github.com/bloomgate/bloomgate/internal/cputime"
)

// BenchmarkLoggedWrite: writes that go through the log (Config.DataDir
// set, fsync policy "no", so the figure is the record's encoding, framing
// and write(2), not the disk's fsync): one Add of 10 new items to a Bloom
// key, one Insert of 1 item to a cuckoo key, and a Reserve of a new key
// (its create record). ns/op is per command; cpu-ns/op the thread's CPU
// time per command (internal/cputime).
//
//	go test -run '^$' -bench LoggedWrite -count 6 ./serve/
func BenchmarkLoggedWrite(b *testing.B) {
	open := func(b *testing.B) *Store {
		s, err := Open(Config{DataDir: b.TempDir(), Fsync: FsyncNo, SnapshotLogBytes: 1 << 40, SnapshotInterval: 1 << 62})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { s.Close() })
		return s
	}
	items := func(n int) [][]byte {
		its := make([][]byte, n)
		for i := range its {
			its[i] = make([]byte, 0, 32)
		}
		return its
	}
	next := func(its [][]byte, id *int) {
		for i := range its {
			its[i] = append(strconv.AppendInt(append(its[i][:0], "user"...), int64(*id), 10), "@example.com"...)
			*id++
		}
	}
	for _, bc := range []struct {
		name  string
		spec  Spec
		items int
		write func(s *Store, its [][]byte) error
	}{
		{"bloom-add-10", BloomParams{Capacity: 1 << 22, ErrorRate: 0.01}, 10, func(s *Store, its [][]byte) error {
			_, stop, err := s.Add("k", its, AddOptions{NoCreate: true})
			return errors.Join(stop, err)
		}},
		{"cuckoo-insert-1", CuckooParams{Capacity: 1 << 22}, 1, func(s *Store, its [][]byte) error {
			_, _, err := s.Insert("k", its, InsertOptions{NoCreate: true})
			return err
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			s := open(b)
			if err := s.Reserve("k", bc.spec); err != nil {
				b.Fatal(err)
			}
			its, id := items(bc.items), 0
			b.ReportAllocs()
			t := cputime.Start(b)
			for b.Loop() {
				next(its, &id)
				if err := bc.write(s, its); err != nil {
					b.Fatal(err)
				}
			}
			t.Stop()
		})
	}
	b.Run("reserve", func(b *testing.B) {
		s := open(b)
		id := 0
		b.ReportAllocs()
		t := cputime.Start(b)
		for b.Loop() {
			if err := s.Reserve("k"+strconv.Itoa(id), BloomParams{Capacity: 10, ErrorRate: 0.01}); err != nil {
				b.Fatal(err)
			}
			id++
		}
		t.Stop()
	})
}
