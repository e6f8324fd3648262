// Package cputime measures the CPU time of the calling thread, for
// benchmarks on a shared machine: unlike wall time it leaves out the time the
// thread waited for a core while other processes ran, which there can be many
// times the benchmark's own. A memory stall still counts: the thread holds
// its core while it waits for memory.
package cputime

import (
	"runtime"
	"testing"
)

// A Timer reads the thread's CPU time around a benchmark's loop:
//
//	t := cputime.Start(b)
//	for b.Loop() { ... }
//	t.Stop()
type Timer struct {
	b     *testing.B
	start int64
	ok    bool
}

// Start locks the goroutine to its OS thread and reads its CPU time.
func Start(b *testing.B) Timer {
	runtime.LockOSThread()
	start, ok := Thread()
	return Timer{b, start, ok}
}

// Stop reports the CPU time since Start per op as the metric "cpu-ns/op"
// (where Thread works) and unlocks the thread.
func (t Timer) Stop() {
	end, ok := Thread()
	runtime.UnlockOSThread()
	if t.ok && ok && t.b.N > 0 {
		t.b.ReportMetric(float64(end-t.start)/float64(t.b.N), "cpu-ns/op")
	}
}
