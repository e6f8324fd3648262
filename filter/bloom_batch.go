package filter

import "sync/atomic"

// Batched lookups.
//
// A lookup in a filter much larger than the CPU caches is one cache miss (and,
// without huge pages, one TLB miss) on the key's block. One at a time, the
// probe's early exit depends on the block's contents, so the CPU stalls on each
// miss before it can start the next. The batched lookups run as a pipeline:
// while they probe key i, they hash key i+lookAhead and load one word of that
// key's block (touch), a load whose result nothing waits for, so up to
// lookAhead misses are in flight while earlier keys are probed in cache.

// lookAhead is how many keys ahead of the probe a batched lookup hashes and
// touches; a power of two, so the ring index is a mask.
const lookAhead = 16

// MayContainMany reports for each keys[i] whether it may be in the filter,
// in out[i], and returns how many of keys may be (the number of true values it
// wrote). out[i] equals what MayContain(keys[i]) would report at the same
// moment; only out[:len(keys)] is written.
//
// len(out) must be at least len(keys): MayContainMany panics, before looking
// anything up, if out is shorter. It does not allocate, and like MayContain it
// is safe to call concurrently with Add: every key whose Add returned before
// the call is reported present.
//
// It is faster per key than MayContain when the filter is larger than the CPU
// caches, because it overlaps the cache misses of several keys.
func (f *Bloom) MayContainMany(keys [][]byte, out []bool) int {
	out = out[:len(keys)]
	words, blocks, seed := f.words, f.blocks, f.seed
	var ring [lookAhead]uint64
	for j, k := range keys[:min(len(keys), lookAhead)] {
		h := Hash(k, seed)
		ring[j] = h
		touch(words, blocks, h)
	}
	n := 0
	for i := range keys {
		h := ring[i%lookAhead]
		if j := i + lookAhead; j < len(keys) {
			hj := Hash(keys[j], seed)
			ring[j%lookAhead] = hj
			touch(words, blocks, hj)
		}
		ok := f.MayContainHash(h)
		out[i] = ok
		if ok {
			n++
		}
	}
	return n
}

// MayContainStrings is MayContainMany for string keys: out[i] reports whether
// keys[i] may be in the filter, as MayContainString(keys[i]) would. It returns
// how many may be, panics if len(out) < len(keys), and does not allocate.
func (f *Bloom) MayContainStrings(keys []string, out []bool) int {
	out = out[:len(keys)]
	words, blocks, seed := f.words, f.blocks, f.seed
	var ring [lookAhead]uint64
	for j, k := range keys[:min(len(keys), lookAhead)] {
		h := HashString(k, seed)
		ring[j] = h
		touch(words, blocks, h)
	}
	n := 0
	for i := range keys {
		h := ring[i%lookAhead]
		if j := i + lookAhead; j < len(keys) {
			hj := HashString(keys[j], seed)
			ring[j%lookAhead] = hj
			touch(words, blocks, hj)
		}
		ok := f.MayContainHash(h)
		out[i] = ok
		if ok {
			n++
		}
	}
	return n
}

// MayContainHashMany is MayContainMany for keys given by their hashes (see
// Hash): out[i] reports what MayContainHash(hashes[i]) would. It returns how
// many may be present, panics if len(out) < len(hashes), and does not
// allocate.
func (f *Bloom) MayContainHashMany(hashes []uint64, out []bool) int {
	out = out[:len(hashes)]
	words, blocks := f.words, f.blocks
	for _, h := range hashes[:min(len(hashes), lookAhead)] {
		touch(words, blocks, h)
	}
	n := 0
	for i, h := range hashes {
		if j := i + lookAhead; j < len(hashes) {
			touch(words, blocks, hashes[j])
		}
		ok := f.MayContainHash(h)
		out[i] = ok
		if ok {
			n++
		}
	}
	return n
}

// touch loads the first word of h's block, so that the block is in cache
// when it is probed lookAhead keys later. The load is atomic because Add may
// be writing the word; an atomic load is a plain MOV on amd64 and arm64, and
// the compiler never removes it, though its value is unused.
func touch(words []uint64, blocks, h uint64) {
	i := (h >> 32) * blocks >> 32
	atomic.LoadUint64(&words[i*blockWords])
}
