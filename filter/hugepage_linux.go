//go:build linux && !purego

package filter

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the architectures Go
// runs Linux on most (x86-64, arm64 with 4 KiB base pages).
const hugePage = 2 << 20

// madvCollapse is MADV_COLLAPSE (Linux 6.1): collapse the range into huge
// pages now, synchronously. Older kernels reject it with EINVAL.
const madvCollapse = 25

// hugePagesOn switches the advice off for benchmarks that measure what it
// gains (BenchmarkLimit's pages=4k rows).
var hugePagesOn = true

// allocWords returns n zeroed words for a filter's table, asking the kernel
// to back it with transparent huge pages (madvise MADV_HUGEPAGE) when it is
// at least one huge page long. A lookup in a table larger than the CPU
// caches then misses in the TLB far less often: one 2 MiB page covers what
// 512 base pages do. It is advice: where the kernel does not give huge pages
// (transparent_hugepage set to never, no contiguous memory), the table works
// the same on base pages. A fresh large allocation is not touched by the Go
// runtime, so its pages fault in only when the table is first written, after
// the advice: the kernel then allocates huge pages directly.
// hugepage_other.go is the portable twin (other systems, build tag purego).
func allocWords(n uint64) []uint64 {
	ws := make([]uint64, n)
	adviseHuge(ws, false)
	return ws
}

// adviseHuge advises huge pages for the whole 2 MiB pages inside ws. With
// collapse set it also asks for the pages already faulted in to be collapsed
// now (a table decoded from a snapshot is written before it can be advised).
// Errors are ignored: the advice changes speed, never contents.
func adviseHuge(ws []uint64, collapse bool) {
	if !hugePagesOn || uint64(len(ws))*8 < hugePage {
		return
	}
	start := uintptr(unsafe.Pointer(unsafe.SliceData(ws)))
	end := start + uintptr(len(ws))*8
	lo, hi := (start+hugePage-1)&^(hugePage-1), end&^(hugePage-1)
	if hi <= lo {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ws))), len(ws)*8)[lo-start : hi-start]
	_ = syscall.Madvise(b, syscall.MADV_HUGEPAGE)
	if collapse {
		_ = syscall.Madvise(b, madvCollapse)
	}
}
