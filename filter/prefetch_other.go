//go:build !amd64 || purego

package filter

import "sync/atomic"

// prefetch loads the first word of the block of every hash in hs, so that the
// blocks are in cache when they are probed. The loads' results are unused;
// they are atomic because Add may be writing the words (and the compiler
// never removes an atomic load). prefetch_amd64.go uses PREFETCHT0 instead.
func (f *Bloom) prefetch(hs []uint64) {
	for _, h := range hs {
		atomic.LoadUint64(&f.block(h)[0])
	}
}
