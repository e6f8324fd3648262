package bloomgate

import (
	"fmt"

	"github.com/bloomgate/bloomgate/filter"
)

// lookupBatch is how many keys a batched lookup answers from one view of the
// gate: few enough that a state change (a degrade, say) reaches the keys
// after it promptly, enough that the view's checks and the counters cost
// nothing per key.
const lookupBatch = 256

// MayContainMany answers MayContain for every key at once: out[i] is false
// only if keys[i] is definitely not in the table. It returns how many are
// "maybe present". With the default Bloom filter the keys' cache misses
// overlap (filter.Bloom.MayContainMany), so a batch costs much less per
// key than one lookup at a time; the answers are the same. out must be at
// least as long as keys. It never blocks and does not allocate (built-in
// normalisers, keys ≤ 256 bytes).
func (g *Gate) MayContainMany(keys [][]byte, out []bool) int {
	if g.cfg.Normalizer.kind == normExact {
		return mayContainExact(g, keys, out, (*filter.Bloom).MayContainMany, bytesKey)
	}
	return g.mayContainBatch(len(keys), func(i int) []byte { return keys[i] }, out)
}

// MayContainStrings is MayContainMany for string keys.
func (g *Gate) MayContainStrings(keys []string, out []bool) int {
	if g.cfg.Normalizer.kind == normExact {
		return mayContainExact(g, keys, out, (*filter.Bloom).MayContainStrings, stringBytes)
	}
	return g.mayContainBatch(len(keys), func(i int) []byte { return stringBytes(keys[i]) }, out)
}

func bytesKey(b []byte) []byte { return b }

// mayContainExact is the batched lookup of keys the Exact normaliser leaves
// as they are: a Bloom filter answers each chunk with one call (many), which
// hashes the keys a group at a time; keys over MaxKeyLen, never in the
// filter, are then answered "maybe". Counters are added once per chunk.
func mayContainExact[K string | []byte](g *Gate, keys []K, out []bool, many func(*filter.Bloom, []K, []bool) int, asBytes func(K) []byte) int {
	out = out[:len(keys)]
	maybe := 0
	for start := 0; start < len(keys); start += lookupBatch {
		end := min(start+lookupBatch, len(keys))
		ks, o := keys[start:end], out[start:end]
		v := g.view.Load()
		if !v.ready && !g.answers(v) {
			maybe += g.failOpenBatch(v, o)
			continue
		}
		var m int
		if v.bloom != nil {
			m = many(v.bloom, ks, o)
		} else {
			for i, k := range ks {
				o[i] = v.f.MayContainHash(filter.Hash(asBytes(k), v.seed))
				if o[i] {
					m++
				}
			}
		}
		long := 0
		for i, k := range ks {
			if len(k) > g.cfg.MaxKeyLen {
				if !o[i] {
					o[i] = true
					m++
				}
				long++
			}
		}
		if long > 0 {
			g.m.failOpenLong.Add(uint64(long))
		}
		g.m.lookups.addN(uint64(m-long), uint64(len(ks)-m)) // the self-audit samples single lookups only
		maybe += m
	}
	return maybe
}

// mayContainBatch answers n keys, key(i) being the i-th, in chunks of
// lookupBatch, normalising each key.
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
	if v.bloom != nil {
		v.bloom.MayContainHashMany(hs, out)
	} else {
		for i, h := range hs {
			out[i] = v.f.MayContainHash(h)
		}
	}
	n, longs := 0, 0
	for i := range hs {
		if long[i] {
			out[i] = true
			longs++
		}
		if out[i] {
			n++
		}
	}
	if longs > 0 {
		g.m.failOpenLong.Add(uint64(longs))
	}
	g.m.lookups.addN(uint64(n-longs), uint64(len(hs)-n)) // the self-audit samples single lookups only
	return n
}

// addBatch is how many keys AddMany adds under one hold of the gate's
// mutex: enough that the lock and the view's checks cost nothing per key,
// few enough that other writers wait no longer than about a microsecond
// per ten keys.
const addBatch = 256

// AddMany is Add for each of keys in turn, holding the gate's mutex once per
// batch of keys instead of once per key. With the default Bloom filter the
// keys' blocks are fetched a group ahead (filter.Bloom.AddHashManyNew), so
// their cache misses overlap; the filter ends up as one Add after the other
// leaves it. Once AddMany returns, no lookup can miss a key it added.
//
// If fresh is not nil (it must be at least as long as keys), fresh[i]
// receives whether MayContain(keys[i]) would have reported the key absent
// just before its Add: false while the gate fails open (MayContain's
// "maybe"), and false for a key repeated within keys or already set by the
// keys before it. The lookups are counted as MayContain's are (the
// self-audit samples single lookups only).
//
// It returns how many keys it added: all of them, or the index of the first
// key Add would refuse (over MaxKeyLen, refused by the filter, the gate
// closed), with the error Add would return for it; the keys after it are
// not added.
func (g *Gate) AddMany(keys [][]byte, fresh []bool) (int, error) {
	if fresh != nil {
		fresh = fresh[:len(keys)]
	}
	done := 0
	for done < len(keys) {
		end := min(done+addBatch, len(keys))
		var fr []bool
		if fresh != nil {
			fr = fresh[done:end]
		}
		n, err := g.addBatch(keys[done:end], fr)
		done += n
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// addBatch adds up to addBatch keys under one hold of g.mu (see AddMany).
func (g *Gate) addBatch(keys [][]byte, fresh []bool) (int, error) {
	var hashes [addBatch]uint64
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	// The keys are hashed under the lock: the seed changes only under it.
	var keyErr error
	n := 0
	for _, key := range keys {
		var buf [256]byte
		nk, ok := g.cfg.Normalizer.normalize(&buf, key, g.cfg.MaxKeyLen)
		if !ok {
			keyErr = fmt.Errorf("%w: %d bytes (limit %d)", ErrKeyTooLong, len(nk), g.cfg.MaxKeyLen)
			break
		}
		hashes[n] = filter.Hash(nk, g.seed)
		n++
	}
	if n == 0 && keyErr != nil {
		g.countFreshLong(fresh)
		return 0, keyErr // Add checks the key before the gate
	}
	if g.closed {
		return 0, ErrClosed
	}
	hs := hashes[:n]
	v := g.view.Load() // its filter's seed is g.seed while g.mu is held
	answers := fresh != nil && g.answers(v)
	if fresh != nil {
		fresh = fresh[:n]
		clear(fresh)
	}
	record := func(h uint64) {
		g.journal.add(now, h)
		switch {
		case g.pending != nil && g.pendingErr == nil:
			g.pendingErr = g.pending.AddHash(h)
		case g.buffering:
			g.pendingBuf = append(g.pendingBuf, h)
		}
	}
	switch {
	case v.bloom != nil: // never refuses a key
		for _, h := range hs {
			record(h)
		}
		if answers {
			v.bloom.AddHashManyNew(hs, fresh)
		} else {
			v.bloom.AddHashMany(hs)
		}
	default:
		for i, h := range hs {
			record(h)
			if v.f == nil {
				continue
			}
			if answers {
				fresh[i] = !v.f.MayContainHash(h)
			}
			if err := v.f.AddHash(h); err != nil {
				if fresh != nil {
					g.countFresh(v, answers, fresh[:i+1])
				}
				g.m.adds.Add(uint64(i))
				g.setStateLocked(StateDegraded, fmt.Sprintf("filter refused a key: %v", err))
				return i, fmt.Errorf("bloomgate: add: %w", err)
			}
		}
	}
	if fresh != nil {
		g.countFresh(v, answers, fresh)
	}
	g.m.adds.Add(uint64(n))
	if keyErr != nil {
		g.countFreshLong(fresh)
		return n, keyErr
	}
	return n, nil
}

// countFresh counts AddMany's lookups (fresh: their answers) as
// MayContain counts them.
func (g *Gate) countFresh(v *view, answers bool, fresh []bool) {
	if !answers {
		g.failOpen(v, uint64(len(fresh)))
		return
	}
	absent := 0
	for _, f := range fresh {
		if f {
			absent++
		}
	}
	g.m.lookups.addN(uint64(len(fresh)-absent), uint64(absent))
}

// countFreshLong counts the lookup of a key over MaxKeyLen before AddMany
// refuses it, as MayContain counts it.
func (g *Gate) countFreshLong(fresh []bool) {
	if fresh == nil {
		return
	}
	if v := g.view.Load(); !g.answers(v) {
		g.failOpen(v, 1)
		return
	}
	g.m.failOpenLong.Add(1)
}
