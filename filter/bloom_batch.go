package filter

import "sync/atomic"

// Batched lookups.
//
// A lookup in a filter much larger than the CPU caches is one cache miss (and,
// without huge pages, one TLB miss) on the key's block. One at a time, the
// probe's early exit depends on the block's contents, so the CPU stalls on each
// miss before it can start the next. The batched lookups work on groups of
// lookupGroup keys in three passes: hash every key of the group, load one word
// of every key's block (independent loads, so their misses overlap), then
// probe the blocks, which are now in cache.

// lookupGroup is how many keys a batched lookup hashes and touches before it
// probes any. 16 is more misses than a core keeps in flight at once, and the
// group's hashes stay in registers and one cache line of stack.
const lookupGroup = 16

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
	var hs [lookupGroup]uint64
	n := 0
	for len(keys) > 0 {
		c := min(len(keys), lookupGroup)
		for i, k := range keys[:c] {
			hs[i] = Hash(k, f.seed)
		}
		n += f.probeGroup(hs[:c], out[:c])
		keys, out = keys[c:], out[c:]
	}
	return n
}

// MayContainStrings is MayContainMany for string keys: out[i] reports whether
// keys[i] may be in the filter, as MayContainString(keys[i]) would. It returns
// how many may be, panics if len(out) < len(keys), and does not allocate.
func (f *Bloom) MayContainStrings(keys []string, out []bool) int {
	out = out[:len(keys)]
	var hs [lookupGroup]uint64
	n := 0
	for len(keys) > 0 {
		c := min(len(keys), lookupGroup)
		for i, k := range keys[:c] {
			hs[i] = HashString(k, f.seed)
		}
		n += f.probeGroup(hs[:c], out[:c])
		keys, out = keys[c:], out[c:]
	}
	return n
}

// MayContainHashMany is MayContainMany for keys given by their hashes (see
// Hash): out[i] reports what MayContainHash(hashes[i]) would. It returns how
// many may be present, panics if len(out) < len(hashes), and does not
// allocate.
func (f *Bloom) MayContainHashMany(hashes []uint64, out []bool) int {
	out = out[:len(hashes)]
	n := 0
	for len(hashes) > 0 {
		c := min(len(hashes), lookupGroup)
		n += f.probeGroup(hashes[:c], out[:c])
		hashes, out = hashes[c:], out[c:]
	}
	return n
}

// probeGroup answers up to lookupGroup hashes into out (len(out) ==
// len(hs)): first it loads the first word of every hash's block, so the
// misses overlap, then it probes each block.
func (f *Bloom) probeGroup(hs []uint64, out []bool) int {
	out = out[:len(hs)]
	words, blocks := f.words, f.blocks
	var touched uint64
	for _, h := range hs {
		i := (h >> 32) * blocks >> 32
		// An atomic load is never removed by the compiler, and it is a plain
		// MOV on amd64 and arm64: the CPU issues all of these at once.
		touched |= atomic.LoadUint64(&words[i*blockWords])
	}
	_ = touched
	n := 0
	for j, h := range hs {
		ok := f.MayContainHash(h)
		out[j] = ok
		if ok {
			n++
		}
	}
	return n
}
