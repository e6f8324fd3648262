//go:build purego

package filter

// blockAt returns block i of words. The unsafe twin (block_unsafe.go) skips
// the bounds check.
func blockAt(words []uint64, i uint64) *[blockWords]uint64 {
	return (*[blockWords]uint64)(words[i*blockWords:])
}
