//go:build linux && !purego

package filter

import (
	"syscall"
	"unsafe"
)

// hugePage is the size of a transparent huge page on the platforms Go runs
// Linux on with 4 KiB base pages.
const hugePage = 2 << 20

// madvHugePage is MADV_HUGEPAGE (linux/mman-common.h).
const madvHugePage = 14

// adviseHuge asks the kernel to back a freshly allocated table with huge
// pages before it is first written, so that decoding a large table faults
// in a few hundred 2 MiB pages instead of thousands of 4 KiB ones. It is a
// hint: a kernel without transparent huge pages, or one set to "never",
// ignores it, and so does the decoder when the call fails.
func adviseHuge(ws []uint64) {
	n := len(ws) * 8
	if n < 2*hugePage {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ws))), n)
	start := (hugePage - int(uintptr(unsafe.Pointer(&b[0]))%hugePage)) % hugePage
	end := start + (n-start)/hugePage*hugePage
	if end > start {
		syscall.Madvise(b[start:end], madvHugePage)
	}
}
