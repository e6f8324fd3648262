//go:build !purego

package filter

// prefetch asks the CPU to start loading the block of every hash in hs
// (PREFETCHT0, prefetch_amd64.s). A prefetch has no result and retires at
// once, so unlike a load it does not hold up the instructions after it while
// its miss is outstanding: a whole group's misses are in flight together.
// prefetch_other.go is the portable twin (other architectures, and build tag
// purego).
func (f *Bloom) prefetch(hs []uint64) {
	if len(hs) > 0 {
		prefetchBlocks(&f.words[0], f.blocks, &hs[0], len(hs))
	}
}

// prefetchBlocks prefetches block (h>>32)*blocks>>32 of words for each of the
// n hashes at hs. Each block index is below blocks, so it reads only words.
//
//go:noescape
func prefetchBlocks(words *uint64, blocks uint64, hs *uint64, n int)
