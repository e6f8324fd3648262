//go:build !linux || purego

package filter

// hugePagesOn has no effect here; it exists for the benchmarks.
var hugePagesOn = true //lint:ignore U1000 the benchmarks set it on every platform

// allocWords returns n zeroed words for a filter's table. hugepage_linux.go
// is the twin that asks Linux for transparent huge pages.
func allocWords(n uint64) []uint64 { return make([]uint64, n) }

// adviseHuge does nothing outside Linux.
func adviseHuge([]uint64, bool) {}
