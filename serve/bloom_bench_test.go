package serve

import (
	"strconv"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/cputime"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// BenchmarkBFMAdd: one BF.MADD of 100 new items (Store.Add, memory only,
// so no log write), into a standalone key reserved for 16 M items at 1 %
// (about 19 MiB: larger than the caches, and never scaling during the run),
// and into a table-backed set's gate sized for 16 M keys. ns/op is per
// command of 100 items; cpu-ns/op the thread's CPU time per command
// (internal/cputime), which leaves out time spent waiting for a core.
//
//	go test -run '^$' -bench BFMAdd -count 6 ./serve/
func BenchmarkBFMAdd(b *testing.B) {
	const batch = 100
	run := func(b *testing.B, s *Store, name string) {
		its := make([][]byte, batch)
		for i := range its {
			its[i] = make([]byte, 0, 32)
		}
		id := 0
		b.ReportAllocs()
		t := cputime.Start(b)
		for b.Loop() {
			for i := range its {
				its[i] = append(strconv.AppendInt(append(its[i][:0], "user"...), int64(id), 10), "@example.com"...)
				id++
			}
			added, stop, err := s.Add(name, its, AddOptions{NoCreate: true})
			if err != nil || stop != nil || len(added) != batch {
				b.Fatalf("Add: %d replies, %v, %v", len(added), stop, err)
			}
		}
		t.Stop()
	}
	b.Run("key", func(b *testing.B) {
		s, err := Open(Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		if err := s.Reserve("bf", BloomParams{Capacity: 1 << 24, ErrorRate: 0.01}); err != nil {
			b.Fatal(err)
		}
		run(b, s, "bf")
	})
	b.Run("set", func(b *testing.B) {
		src := memfeed.NewSource() // no rows: every key comes through BF.MADD
		src.SetEstimate(1 << 23)
		s, err := Open(Config{Sets: []SetConfig{{Name: "users", Source: src, Capacity: 1 << 24}}})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for !s.Ready() {
			time.Sleep(time.Millisecond)
		}
		run(b, s, "users")
	})
}

// BenchmarkAdd: one item per call into a Bloom key reserved for 16 M items
// at 1 % (memory only, so no log write), held already or new: "alloc"
// through Add, which allocates the replies, "reuse" through AppendAdd into
// a buffer reused, as a front end answering BF.ADD does.
//
//	go test -run '^$' -bench 'BenchmarkAdd' -benchmem ./serve/
func BenchmarkAdd(b *testing.B) {
	s := benchKey(b)
	held := [][]byte{[]byte("user1@example.com")}
	s.Add("bf", held, AddOptions{})
	fresh := [][]byte{make([]byte, 0, 32)}
	id := 0
	next := func() [][]byte {
		fresh[0] = strconv.AppendInt(append(fresh[0][:0], "new"...), int64(id), 10)
		id++
		return fresh
	}
	b.Run("held/alloc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Add("bf", held, AddOptions{})
		}
	})
	b.Run("held/reuse", func(b *testing.B) {
		var buf []bool
		b.ReportAllocs()
		for b.Loop() {
			buf, _, _ = s.AppendAdd(buf[:0], "bf", held, AddOptions{})
		}
	})
	b.Run("new/alloc", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			s.Add("bf", next(), AddOptions{})
		}
	})
	b.Run("new/reuse", func(b *testing.B) {
		var buf []bool
		b.ReportAllocs()
		for b.Loop() {
			buf, _, _ = s.AppendAdd(buf[:0], "bf", next(), AddOptions{})
		}
	})
}

func benchKey(b *testing.B) *Store {
	s, err := Open(Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	if err := s.Reserve("bf", BloomParams{Capacity: 1 << 24, ErrorRate: 0.01}); err != nil {
		b.Fatal(err)
	}
	return s
}
