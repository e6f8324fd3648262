//go:build !amd64 || purego

package filter

import "sync/atomic"

// useAVX512 is always false here: the portable probe has no vector twin.
var useAVX512 = false

// prefetch loads the first word of the block of every hash in hs, so that the
// blocks are in cache when they are probed. The loads' results are unused;
// they are atomic because Add may be writing the words (and the compiler
// never removes an atomic load). batch_amd64.go uses PREFETCHT0 instead.
func (f *Bloom) prefetch(hs []uint64) {
	for _, h := range hs {
		atomic.LoadUint64(&f.block(h)[0])
	}
}

// probeAll sets out[i] to MayContainHash(hs[i]) (len(out) >= len(hs)) and
// returns how many are true, testing all K bits of every key with no branch
// on any of them (see batch_amd64.go, whose assembly this is the twin of).
func (f *Bloom) probeAll(hs []uint64, out []bool) int {
	out = out[:len(hs)]
	n := 0
	k := f.k
	for i, h := range hs {
		b := f.block(h)
		set := uint32(0)
		for j := k; j > 0; j-- {
			h *= probeMul
			bit := uint32(0)
			if atomic.LoadUint64(&b[h>>61])&(1<<((h>>55)&63)) != 0 {
				bit = 1
			}
			set += bit
		}
		out[i] = set == k
		if set == k {
			n++
		}
	}
	return n
}
