package serve

import (
	"strconv"
	"testing"
)

// BenchmarkSnapshot: a keyspace of one Bloom key reserved for 4 M items at
// 1 % holding 1 M items and one cuckoo key reserved for 1 M holding 200 k
// (about 6 MiB of filters), written as a snapshot (dump: Store.Snapshot)
// and read back when a store opens its data directory (load: Open; the
// log is empty, so the figure is the snapshot's read). ns/op is per
// snapshot.
//
//	go test -run '^$' -bench Snapshot -count 6 ./serve/
func BenchmarkSnapshot(b *testing.B) {
	dir := b.TempDir()
	cfg := Config{DataDir: dir, Fsync: FsyncNo, SnapshotLogBytes: 1 << 40, SnapshotInterval: 1 << 62}
	s, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { s.Close() }()
	if err := s.Reserve("bf", BloomParams{Capacity: 1 << 22, ErrorRate: 0.01}); err != nil {
		b.Fatal(err)
	}
	if err := s.Reserve("cf", CuckooParams{Capacity: 1 << 20}); err != nil {
		b.Fatal(err)
	}
	its := make([][]byte, 1000)
	for id := 0; id < 1_000_000; id += len(its) {
		for i := range its {
			its[i] = strconv.AppendInt(append(its[i][:0], "user"...), int64(id+i), 10)
		}
		if _, stop, err := s.Add("bf", its, AddOptions{NoCreate: true}); err != nil || stop != nil {
			b.Fatal(stop, err)
		}
		if id < 200_000 {
			if _, _, err := s.Insert("cf", its, InsertOptions{NoCreate: true}); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.Run("dump", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if err := s.Snapshot(); err != nil {
				b.Fatal(err)
			}
		}
	})
	if err := s.Snapshot(); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	b.Run("load", func(b *testing.B) {
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			s2, err := Open(cfg)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			if err := s2.Close(); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
	})
	s, err = Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
}
