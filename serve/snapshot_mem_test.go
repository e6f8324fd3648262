package serve

import (
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
)

// TestSnapshotLoadAllocatesTableOnce: a filter read from a snapshot is
// allocated once, at its size. Grown from 8 MiB instead, a 14 MB table left
// a copy's worth of garbage at every start, and a table with more capacity
// than it holds for as long as the filter lives.
func TestSnapshotLoadAllocatesTableOnce(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{DataDir: dir})
	if err := s.Reserve("big", BloomParams{Capacity: 10_000_000, ErrorRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	path := newestSnapshot(t, dir)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := durable.NewSnapshotReader(f, st.Size(), defaultMaxFilterBytes)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := loadEntries(r, defaultMaxFilterBytes, time.Now)
	runtime.ReadMemStats(&after)
	if err != nil || len(objs) != 1 {
		t.Fatalf("loadEntries: %d keys, %v", len(objs), err)
	}
	if alloc := after.TotalAlloc - before.TotalAlloc; alloc > uint64(st.Size())+uint64(st.Size())/8 {
		t.Errorf("loading a snapshot of %d bytes allocated %d bytes; want the filter's table allocated once", st.Size(), alloc)
	}
}
