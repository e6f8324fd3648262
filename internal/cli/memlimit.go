package cli

import (
	"context"
	"os"
	"runtime/debug"
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

// followMemoryLimit keeps the Go runtime's soft memory limit at memoryLimit
// of what the server holds, checked every second, until ctx ends. It does
// nothing when GOMEMLIMIT is set.
func followMemoryLimit(ctx context.Context, used, conns func() int64, maxMemory int64) {
	if os.Getenv("GOMEMLIMIT") != "" {
		return
	}
	set := func() { debug.SetMemoryLimit(memoryLimit(used(), maxMemory, conns())) }
	set()
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
