package filter

// A BloomBuilder fills a Bloom that no other goroutine can see yet: a first
// build, a rebuild off to the side, or catching a freshly decoded filter up
// with the keys written since it was saved. It sets bits with plain writes
// instead of Bloom.Add's atomic OR, which on most CPUs orders every memory
// access around it; plain writes let the cache misses of consecutive keys
// overlap, so adding to a filter larger than the CPU caches is several times
// faster.
//
// Use it like this: build (NewBloomBuilder, or Bloom.Builder for a filter the
// caller has to itself), Add every key from one goroutine, call Finish, then
// publish the *Bloom Finish returns to other goroutines by a synchronizing
// operation (atomic.Pointer.Store, a channel send, a mutex, a sync.WaitGroup,
// starting the goroutines after Finish). Every key added before Finish is then
// reported present on every goroutine that received the filter that way, and
// the filter is safe for concurrent use as any Bloom.
//
// A BloomBuilder is not safe for concurrent use, and until Finish returns no
// other goroutine may use its filter in any way (not even MayContain, Stats or
// WriteTo): such use is a data race, and concurrent Adds may lose each other's
// bits (false negatives). A filter that is already shared must be filled with
// Bloom.Add instead. Create one with NewBloomBuilder or Bloom.Builder; the
// zero value is not usable.
type BloomBuilder struct {
	f     *Bloom
	added uint64
}

// NewBloomBuilder returns a builder of an empty filter sized for cfg, with the
// same defaults and errors as NewBloom.
func NewBloomBuilder(cfg BloomConfig) (*BloomBuilder, error) {
	f, err := NewBloom(cfg)
	if err != nil {
		return nil, err
	}
	return &BloomBuilder{f: f}, nil
}

// Builder returns a builder that continues filling f, for example after
// DecodeBloom. The caller must have f to itself from this call until the
// builder's Finish returns: no other goroutine may hold f or use it (see
// BloomBuilder). Finish returns f itself.
func (f *Bloom) Builder() *BloomBuilder { return &BloomBuilder{f: f} }

// Hash returns the hash of key under the filter's seed, for AddHash.
func (b *BloomBuilder) Hash(key []byte) uint64 { return Hash(key, b.f.seed) }

// Add inserts key.
func (b *BloomBuilder) Add(key []byte) { b.AddHash(Hash(key, b.f.seed)) }

// AddString inserts key.
func (b *BloomBuilder) AddString(key string) { b.AddHash(HashString(key, b.f.seed)) }

// AddHash inserts a key by its hash (see Bloom.Hash and BloomBuilder.Hash):
// the same bits Bloom.AddHash sets.
func (b *BloomBuilder) AddHash(h uint64) {
	f := b.f
	blk := f.block(h)
	g := h
	for i := f.k; i > 0; i-- {
		g *= probeMul
		pos := g >> (64 - 9)
		blk[pos>>6] |= 1 << (pos & 63)
	}
	b.added++
}

// Finish returns the filter with every key added so far, its item count
// updated. The builder must not be used after Finish; the filter is then safe
// for concurrent use once published (see BloomBuilder).
func (b *BloomBuilder) Finish() *Bloom {
	f := b.f
	f.items.Add(b.added)
	b.f, b.added = nil, 0
	return f
}

// AddHashMany inserts the keys with hashes hs, as AddHash does for each; it
// fetches the blocks of one group of keys while it sets the bits of the group
// before, so their cache misses overlap (a filter larger than the CPU caches
// fills several times faster than one AddHash at a time).
func (b *BloomBuilder) AddHashMany(hs []uint64) {
	b.f.prefetch(hs[:min(len(hs), hashGroup)])
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		b.f.prefetch(hs[end:min(end+hashGroup, len(hs))])
		for _, h := range hs[i:end] {
			b.AddHash(h)
		}
	}
}
