package cli

import (
	"context"
	"os"
	"runtime/debug"
	"runtime/metrics"
	"time"
)

// Memory limit for `bloomgate serve`. A durable server's heap is mostly its
// filters: large, pointer-free tables the collector scans in no time. With
// only GOGC (100), the heap may grow to twice what is live before a
// collection, so garbage from commands doubled the memory of a big filter.
// A soft limit just above what the server holds makes the collector run
// earlier instead; collections stay cheap because the tables hold no
// pointers.
//
// memLimitBase is what the runtime holds beyond the filters and the
// connections' buffers: an idle server maps about 6 MiB (stacks, the
// collector's metadata, the profiler's tables), and the rest is room for
// garbage between collections. Less room does not pay: with 8 MiB a filled
// 10 M-item filter's server held 4 MB less, but 50 connections pipelining
// BF.EXISTS on a small filter ran 25 times as many collections (the room
// left was about nothing) and cost more CPU; with 6 MiB filling the big
// filter took four times the CPU.
const (
	memLimitBase    = 12 << 20
	memLimitPerConn = 96 << 10 // a connection's read and write buffers, with room
)

// memoryLimit is the soft limit for filters of used bytes (bounded by
// maxMemory when set) and conns open connections.
func memoryLimit(used, maxMemory, conns int64) int64 {
	if maxMemory > 0 {
		used = min(used, maxMemory)
	}
	return used + used/16 + conns*memLimitPerConn + memLimitBase
}

// currentMemoryLimit is memoryLimit of what the server holds now: the
// standalone filters' used bytes, or the heap live after the last
// collection when that is more. The store does not count table-backed
// sets' filters (nor a rebuild's second filter), and a limit below the
// live heap makes the collector run back to back.
func currentMemoryLimit(used, maxMemory, conns int64) int64 {
	return max(memoryLimit(used, maxMemory, conns), memoryLimit(liveHeap(), 0, conns))
}

// liveHeap returns the heap bytes marked live by the last collection.
func liveHeap() int64 {
	s := []metrics.Sample{{Name: "/gc/heap/live:bytes"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0
	}
	return int64(s[0].Value.Uint64())
}

// followMemoryLimit keeps the Go runtime's soft memory limit at
// currentMemoryLimit, checked every second, until ctx ends. The first
// limit comes a second after the start: the sets' snapshots load in its
// first milliseconds, and a limit taken before them would sit below the
// heap until the next check. It does nothing when GOMEMLIMIT is set.
func followMemoryLimit(ctx context.Context, used, conns func() int64, maxMemory int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	set := func() { debug.SetMemoryLimit(currentMemoryLimit(used(), maxMemory, conns())) }
	go func() {
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				set()
			}
		}
	}()
}
