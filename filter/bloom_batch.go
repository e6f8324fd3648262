package filter

import "sync/atomic"

// Batched lookups.
//
// A lookup in a filter much larger than the CPU caches is one cache miss (and,
// without huge pages, one TLB miss) on the key's block. One at a time, the
// probe's early exit depends on the block's contents, so the CPU stalls on each
// miss before it can start the next. The batched lookups first load one word
// of the block of several keys (touch), loads whose results nothing waits for,
// so their misses are in flight together, then probe those blocks in cache.
// MayContainMany and MayContainStrings touch each key's block as soon as they
// have hashed it, so the misses also overlap the hashing of the next keys of
// the group, and probe the group after; MayContainHashMany, which has no
// hashing to hide behind, touches lookAhead keys ahead of the one it probes.

// hashGroup is how many keys MayContainMany hashes and touches before it
// probes them.
const hashGroup = 32

// lookAhead is how many hashes ahead of its probe MayContainHashMany touches.
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
	var hs [hashGroup]uint64
	n := 0
	for len(keys) > 0 {
		c := min(len(keys), hashGroup)
		for i, k := range keys[:c] {
			h := Hash(k, f.seed)
			hs[i] = h
			f.touch(h)
		}
		n += f.probeAll(hs[:c], out[:c])
		keys, out = keys[c:], out[c:]
	}
	return n
}

// MayContainStrings is MayContainMany for string keys: out[i] reports whether
// keys[i] may be in the filter, as MayContainString(keys[i]) would. It returns
// how many may be, panics if len(out) < len(keys), and does not allocate.
func (f *Bloom) MayContainStrings(keys []string, out []bool) int {
	out = out[:len(keys)]
	var hs [hashGroup]uint64
	n := 0
	for len(keys) > 0 {
		c := min(len(keys), hashGroup)
		for i, k := range keys[:c] {
			h := HashString(k, f.seed)
			hs[i] = h
			f.touch(h)
		}
		n += f.probeAll(hs[:c], out[:c])
		keys, out = keys[c:], out[c:]
	}
	return n
}

// probeAll probes the blocks of hs, already touched, into out.
func (f *Bloom) probeAll(hs []uint64, out []bool) int {
	out = out[:len(hs)]
	n := 0
	for i, h := range hs {
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
	for _, h := range hashes[:min(len(hashes), lookAhead)] {
		f.touch(h)
	}
	n := 0
	for i, h := range hashes {
		if j := i + lookAhead; j < len(hashes) {
			f.touch(hashes[j])
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
// when it is probed. The load is atomic because Add may
// be writing the word; an atomic load is a plain MOV on amd64 and arm64, and
// the compiler never removes it, though its value is unused.
func (f *Bloom) touch(h uint64) {
	atomic.LoadUint64(&f.block(h)[0])
}
