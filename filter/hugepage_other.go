//go:build !linux || purego

package filter

// adviseHuge is a no-op where the kernel offers no madvise(MADV_HUGEPAGE).
func adviseHuge([]uint64) {}
