//go:build !purego

package filter

import "unsafe"

// blockAt returns block i of words without a bounds check. Every caller
// derives i by multiply-shift from a 32-bit value, (x * blocks) >> 32 with
// x < 2³², so i < blocks = len(words)/blockWords always holds. block_safe.go is
// the bounds-checked twin (build tag purego), tested in CI.
func blockAt(words []uint64, i uint64) *[blockWords]uint64 {
	return (*[blockWords]uint64)(unsafe.Add(unsafe.Pointer(unsafe.SliceData(words)), i*blockWords*8))
}
