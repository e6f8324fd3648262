package bloomgate

import "github.com/bloomgate/bloomgate/filter"

// lookupBatch is how many keys a batched lookup hashes before it probes:
// enough for the filter to overlap their cache misses, few enough to stay on
// the stack.
const lookupBatch = 64

// MayContainMany answers MayContain for every key at once: out[i] is false
// only if keys[i] is definitely not in the table. It returns how many are
// "maybe present". With the default Bloom filter the keys' cache misses
// overlap (filter.Bloom.MayContainHashMany), so a batch costs much less per
// key than one lookup at a time; the answers are the same. out must be at
// least as long as keys. It never blocks and does not allocate (built-in
// normalisers, keys ≤ 256 bytes).
func (g *Gate) MayContainMany(keys [][]byte, out []bool) int {
	return g.mayContainBatch(len(keys), func(i int) []byte { return keys[i] }, out)
}

// MayContainStrings is MayContainMany for string keys.
func (g *Gate) MayContainStrings(keys []string, out []bool) int {
	return g.mayContainBatch(len(keys), func(i int) []byte { return stringBytes(keys[i]) }, out)
}

// mayContainBatch answers n keys, key(i) being the i-th, in chunks of
// lookupBatch.
func (g *Gate) mayContainBatch(n int, key func(i int) []byte, out []bool) int {
	out = out[:n]
	maybe := 0
	for start := 0; start < n; start += lookupBatch {
		end := min(start+lookupBatch, n)
		v := g.view.Load()
		if !g.answers(v) {
			maybe += g.failOpenBatch(v, out[start:end])
			continue
		}
		var hs [lookupBatch]uint64
		var long [lookupBatch]bool
		for i := start; i < end; i++ {
			hs[i-start], long[i-start] = g.hashFor(v, key(i))
		}
		maybe += g.probeBatch(v, hs[:end-start], long[:end-start], out[start:end])
	}
	return maybe
}

// hashFor normalises and hashes key for v's filter; long reports a key over
// MaxKeyLen, which is never in the filter and always "maybe".
func (g *Gate) hashFor(v *view, key []byte) (h uint64, long bool) {
	var buf [256]byte
	nk, ok := g.cfg.Normalizer.normalize(&buf, key, g.cfg.MaxKeyLen)
	if !ok {
		return 0, true
	}
	return filter.Hash(nk, v.seed), false
}

func (g *Gate) failOpenBatch(v *view, out []bool) int {
	for i := range out {
		out[i] = true
	}
	g.failOpen(v, uint64(len(out)))
	return len(out)
}

// probeBatch looks the hashes up in v's filter, in one batch when the filter
// offers it.
func (g *Gate) probeBatch(v *view, hs []uint64, long []bool, out []bool) int {
	if b, ok := v.f.(*filter.Bloom); ok {
		b.MayContainHashMany(hs, out)
	} else {
		for i, h := range hs {
			out[i] = v.f.MayContainHash(h)
		}
	}
	n := 0
	for i, h := range hs {
		if long[i] {
			out[i] = true
			g.m.failOpenLong.Add(1)
		} else {
			g.m.lookups.add(h, out[i]) // the self-audit samples single lookups only
		}
		if out[i] {
			n++
		}
	}
	return n
}
