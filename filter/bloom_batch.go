package filter

// Batched lookups.
//
// A lookup in a filter much larger than the CPU caches is one cache miss (and,
// without huge pages, one TLB miss) on the key's block. One at a time, the
// probe's early exit depends on the block's contents, so the CPU stalls on each
// miss before it can start on the next keys. The batched lookups work on
// groups of hashGroup keys, as a two-stage pipeline: hash group g+1 and
// prefetch its blocks (prefetch), then probe group g, whose blocks were
// prefetched one step earlier and are now in cache. The misses of a whole
// group are in flight together, and behind the hashing and probing of the
// keys around them.

// hashGroup is how many keys a batched lookup hashes and prefetches at once.
const hashGroup = 32

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
// caches, because it overlaps the cache misses of many keys.
func (f *Bloom) MayContainMany(keys [][]byte, out []bool) int {
	return mayContainKeys(f, keys, out)
}

// MayContainStrings is MayContainMany for string keys: out[i] reports whether
// keys[i] may be in the filter, as MayContainString(keys[i]) would. It returns
// how many may be, panics if len(out) < len(keys), and does not allocate.
func (f *Bloom) MayContainStrings(keys []string, out []bool) int {
	return mayContainKeys(f, keys, out)
}

// mayContainKeys hashes keys a group at a time, prefetches the group's
// blocks, and probes the group before while those loads are in flight.
func mayContainKeys[K string | []byte](f *Bloom, keys []K, out []bool) int {
	out = out[:len(keys)]
	var ring [2][hashGroup]uint64
	n, prev, g := 0, 0, 0
	var prevOut []bool
	for len(keys) > 0 || prev > 0 {
		c := min(len(keys), hashGroup)
		hs := ring[g][:c]
		hashKeys(keys[:c], f.seed, hs)
		f.prefetch(hs)
		n += f.probeAll(ring[g^1][:prev], prevOut)
		prev, prevOut, g = c, out[:c], g^1
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
	f.prefetch(hashes[:min(len(hashes), hashGroup)])
	n := 0
	for i := 0; i < len(hashes); i += hashGroup {
		end := min(i+hashGroup, len(hashes))
		f.prefetch(hashes[end:min(end+hashGroup, len(hashes))])
		n += f.probeAll(hashes[i:end], out[i:end])
	}
	return n
}

// AddMany inserts keys, as Add does each, and returns nil. It hashes a group
// of keys in one call, and fetches the blocks of the next group while it
// sets the bits of this one, so their cache misses overlap: for callers that
// add many keys at once (a batch of writes, a replayed log) it is several
// times faster per key than Add. Like Add it is safe to call concurrently
// with every other method, and once it returns each key is reported present
// on every goroutine.
func (f *Bloom) AddMany(keys [][]byte) error { addKeys(f, keys); return nil }

// AddStrings is AddMany for string keys. It returns nil.
func (f *Bloom) AddStrings(keys []string) error { addKeys(f, keys); return nil }

// AddHashMany is AddMany for keys given by their hashes (see Hash). It
// returns nil.
func (f *Bloom) AddHashMany(hs []uint64) error {
	f.prefetch(hs[:min(len(hs), hashGroup)])
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		f.prefetch(hs[end:min(end+hashGroup, len(hs))])
		for _, h := range hs[i:end] {
			f.setBits(h)
		}
	}
	f.items.Add(uint64(len(hs)))
	return nil
}

// AddHashManyNew is AddHashMany that also reports, in added[i], whether
// hs[i] was new: whether MayContainHash(hs[i]) was false just before it was
// added, as if each hash were looked up and added in turn (so a hash repeated
// in hs is new at most once). It returns how many were new, panics if
// len(added) < len(hs) before adding anything, and does not allocate. Like
// AddHashMany it counts every hash in Items. A caller that answers "was
// this new?" per key (BF.MADD) thus gets the answers of one-at-a-time adds
// at the batch's speed.
func (f *Bloom) AddHashManyNew(hs []uint64, added []bool) int {
	added = added[:len(hs)]
	f.prefetch(hs[:min(len(hs), hashGroup)])
	n := 0
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		f.prefetch(hs[end:min(end+hashGroup, len(hs))])
		for j, h := range hs[i:end] {
			a := f.setBits(h)
			added[i+j] = a
			if a {
				n++
			}
		}
	}
	f.items.Add(uint64(len(hs)))
	return n
}

func addKeys[K string | []byte](f *Bloom, keys []K) {
	var ring [2][hashGroup]uint64
	prev, g := 0, 0
	n := uint64(len(keys))
	for len(keys) > 0 || prev > 0 {
		c := min(len(keys), hashGroup)
		hs := ring[g][:c]
		hashKeys(keys[:c], f.seed, hs)
		f.prefetch(hs)
		for _, h := range ring[g^1][:prev] {
			f.setBits(h)
		}
		prev, g = c, g^1
		keys = keys[c:]
	}
	f.items.Add(n)
}
