package cli

import (
	"context"
	"math"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
)

// TestMemoryLimitCoversLiveHeap: the soft limit is never below the heap
// the server holds, whatever the store counts. Table-backed sets' filters
// are not in Store.UsedMemory; a limit under a 32 MiB filter made the
// collector run back to back (58 collections in the first half second of
// a restart on a 10 M-key set, each stopping the world).
func TestMemoryLimitCoversLiveHeap(t *testing.T) {
	filter := make([]byte, 32<<20) // pointer-free, like a filter's table
	for i := range filter {
		filter[i] = byte(i)
	}
	runtime.GC()
	lim := currentMemoryLimit(0, 0, 0)
	runtime.KeepAlive(filter)
	if lim < int64(len(filter))+memLimitBase {
		t.Fatalf("limit %d MiB with a live 32 MiB filter the store does not count", lim>>20)
	}
}

// TestMemoryLimitNotDuringStart: the first limit comes after the start,
// not before the sets' snapshots are loaded (the heap then holds little,
// and every filter loaded after would be above the limit).
func TestMemoryLimitNotDuringStart(t *testing.T) {
	t.Setenv("GOMEMLIMIT", "")
	before := debug.SetMemoryLimit(-1)
	defer debug.SetMemoryLimit(before)
	debug.SetMemoryLimit(math.MaxInt64)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	followMemoryLimit(ctx, func() int64 { return 0 }, func() int64 { return 0 }, 0)
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("limit set to %d MiB as the server starts", got>>20)
	}
	deadline := time.Now().Add(time.Minute)
	for debug.SetMemoryLimit(-1) == math.MaxInt64 {
		if time.Now().After(deadline) {
			t.Fatal("no limit a minute after the start")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
