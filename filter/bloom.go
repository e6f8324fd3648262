package filter

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync/atomic"
)

// BloomConfig configures NewBloom.
type BloomConfig struct {
	// Capacity is the number of distinct keys the filter is sized for.
	// Required; must be > 0. Adding more keys raises the false-positive rate
	// above FPRate (see Sizing.FPRateAt) but never causes false negatives.
	Capacity uint64
	// FPRate is the target false-positive rate at Capacity.
	// Default: DefaultFPRate (0.1 %).
	FPRate float64
	// Seed seeds the key hash. Filters must share a seed to be unioned.
	// Default: 0.
	Seed uint64
}

// Bloom is a blocked Bloom filter: each key sets K bits inside one 64-byte
// block, so a lookup touches a single cache line. It is sized with SizeBloom
// so that the false-positive rate at capacity does not exceed the target.
//
// A Bloom is safe for concurrent use without locks: Add sets bits with atomic
// OR and MayContain reads words atomically and never blocks. Once Add(key)
// returns, MayContain(key) is true on every goroutine.
type Bloom struct {
	words    []uint64 // blocks × 8 words
	blocks   uint64
	k        uint32
	seed     uint64
	capacity uint64
	fpRate   float64
	items    atomic.Uint64
}

var _ Filter = (*Bloom)(nil)

// NewBloom returns an empty filter sized for cfg.
func NewBloom(cfg BloomConfig) (*Bloom, error) {
	if cfg.FPRate == 0 {
		cfg.FPRate = DefaultFPRate
	}
	s, err := SizeBloom(cfg.Capacity, cfg.FPRate)
	if err != nil {
		return nil, err
	}
	return newBloom(s, cfg.Seed), nil
}

func newBloom(s Sizing, seed uint64) *Bloom {
	return &Bloom{
		words:    allocWords(s.Blocks * blockWords),
		blocks:   s.Blocks,
		k:        uint32(s.K),
		seed:     seed,
		capacity: s.Capacity,
		fpRate:   s.FPRate,
	}
}

// Sizing returns the filter's geometry.
func (f *Bloom) Sizing() Sizing {
	return Sizing{Capacity: f.capacity, FPRate: f.fpRate, Blocks: f.blocks, K: int(f.k)}
}

// Seed returns the hash seed.
func (f *Bloom) Seed() uint64 { return f.seed }

// Hash returns the hash of key under this filter's seed, for AddHash and
// MayContainHash.
func (f *Bloom) Hash(key []byte) uint64 { return Hash(key, f.seed) }

// Items returns the successful Adds, duplicates counted (Union adds g's).
// It reads a counter, not the table.
func (f *Bloom) Items() uint64 { return f.items.Load() }

// Bytes returns the memory held by the table.
func (f *Bloom) Bytes() uint64 { return uint64(len(f.words)) * 8 }

// Add inserts key. It always returns nil: a Bloom takes any number of keys
// (past Capacity the false-positive rate rises above FPRate), and from then
// on MayContain(key) is true for the filter's whole life.
func (f *Bloom) Add(key []byte) error { f.addHash(Hash(key, f.seed)); return nil }

// AddString is Add for a string key. It always returns nil.
func (f *Bloom) AddString(key string) error { f.addHash(HashString(key, f.seed)); return nil }

// MayContain reports whether key may be in the filter.
func (f *Bloom) MayContain(key []byte) bool {
	_, maybe := lookupKey(f, key) // hashes like Hash; see hash_short.go
	return maybe
}

// MayContainString reports whether key may be in the filter.
func (f *Bloom) MayContainString(key string) bool {
	_, maybe := lookupKey(f, key)
	return maybe
}

// block returns the 8-word block for h. The top 32 bits of h choose the block
// by multiply-shift (Lemire), the rest of h seeds the probe sequence.
func (f *Bloom) block(h uint64) *[blockWords]uint64 {
	return blockAt(f.words, (h>>32)*f.blocks>>32)
}

// Probe positions: repeated multiplication by an odd 64-bit constant, taking
// the top 9 bits each time (as RocksDB's FastLocalBloom does with 32 bits).
// The top bits of a product depend on every bit of the multiplicand, so the
// positions are independent of the block choice.
const probeMul = 0x9E3779B97F4A7C15

// AddHash is Add for a key's hash (see Hash). It always returns nil.
func (f *Bloom) AddHash(h uint64) error { f.addHash(h); return nil }

func (f *Bloom) addHash(h uint64) {
	f.setBits(h)
	f.items.Add(1)
}

// setBits sets h's K bits with atomic OR, one locked instruction per word
// that lacks one of them, and reports whether any was missing: whether
// MayContainHash(h) was false just before.
func (f *Bloom) setBits(h uint64) (added bool) {
	b := f.block(h)
	var m [blockWords]uint64
	g := h
	for i := f.k; i > 0; i-- {
		g *= probeMul
		pos := g >> (64 - 9)
		m[pos>>6] |= 1 << (pos & 63)
	}
	for j := range b {
		// Skip the locked instruction when the bits are already there.
		if m[j] != 0 && atomic.LoadUint64(&b[j])&m[j] != m[j] {
			atomic.OrUint64(&b[j], m[j])
			added = true
		}
	}
	return added
}

// MayContainHash reports whether the key with hash h may be in the filter.
func (f *Bloom) MayContainHash(h uint64) bool {
	b := f.block(h)
	g := h
	for i := f.k; i > 0; i-- {
		g *= probeMul
		pos := g >> (64 - 9)
		if atomic.LoadUint64(&b[pos>>6])&(1<<(pos&63)) == 0 {
			return false
		}
	}
	return true
}

// Union sets f to the union of f and g: afterwards f reports present every key
// either reported present. Both must have the same geometry and seed
// (ErrIncompatible otherwise). Safe to call while f and g are in use.
func (f *Bloom) Union(g *Bloom) error {
	if f.blocks != g.blocks || f.k != g.k || f.seed != g.seed {
		return fmt.Errorf("%w: blocks %d/%d, k %d/%d, seed %d/%d", ErrIncompatible,
			f.blocks, g.blocks, f.k, g.k, f.seed, g.seed)
	}
	for i := range f.words {
		if w := atomic.LoadUint64(&g.words[i]); w != 0 {
			atomic.OrUint64(&f.words[i], w)
		}
	}
	f.items.Add(g.items.Load())
	return nil
}

// Clone returns an independent copy of f. Keys acknowledged before Clone was
// called are in the copy; keys added concurrently may or may not be.
func (f *Bloom) Clone() *Bloom {
	c := newBloom(f.Sizing(), f.seed)
	for i := range f.words {
		c.words[i] = atomic.LoadUint64(&f.words[i])
	}
	c.items.Store(f.items.Load())
	return c
}

// Stats reports the filter's size and fill. It reads the whole table, so it
// costs O(size); call it from monitoring, not per lookup.
func (f *Bloom) Stats() Stats {
	var set uint64
	var fp, distinct float64
	k := float64(f.k)
	// Each block's terms depend only on its count of set bits (0–512):
	// for a large table they are looked up, not computed per block. The
	// table holds the very values the loop would compute, so the sums
	// come out the same, bit for bit.
	var terms *blockTerms
	if f.blocks >= blockTermsFrom {
		terms = newBlockTerms(k)
	}
	for i := 0; i < len(f.words); i += blockWords {
		c := 0
		for j := range blockWords {
			c += bits.OnesCount64(atomic.LoadUint64(&f.words[i+j]))
		}
		set += uint64(c)
		if terms != nil {
			fp += terms.fp[c]
			distinct += terms.distinct[c]
			continue
		}
		fpTerm, distinctTerm := blockTerm(c, k)
		fp += fpTerm
		distinct += distinctTerm
	}
	bitsTotal := f.blocks * blockBits
	return Stats{
		Kind:              KindBloom,
		Capacity:          f.capacity,
		TargetFPRate:      f.fpRate,
		Items:             f.items.Load(),
		EstimatedDistinct: distinct,
		Bytes:             uint64(len(f.words)) * 8,
		Bits:              bitsTotal,
		K:                 int(f.k),
		FillRatio:         float64(set) / float64(bitsTotal),
		EstimatedFPRate:   fp / float64(f.blocks),
	}
}

// blockTerm is a block's share of Stats' sums for c bits set: its
// false-positive rate and its distinct-key estimate (Swamidass–Baldi,
// capped when the block is saturated).
func blockTerm(c int, k float64) (fp, distinct float64) {
	x := float64(c) / blockBits
	return math.Pow(x, k), -blockBits / k * math.Log1p(-min(float64(c), blockBits-1)/blockBits)
}

// blockTermsFrom is the table size from which Stats looks its terms up:
// filling the table costs about what 2 × 513 blocks' terms do.
const blockTermsFrom = 4096

// blockTerms holds blockTerm for every count of set bits.
type blockTerms struct{ fp, distinct [blockBits + 1]float64 }

func newBlockTerms(k float64) *blockTerms {
	t := new(blockTerms)
	for c := range t.fp {
		t.fp[c], t.distinct[c] = blockTerm(c, k)
	}
	return t
}

// bloomParamsLen is the size of the Bloom parameter block in the format:
// capacity u64, fp rate f64, blocks u64, k u32, reserved u32, items u64.
const bloomParamsLen = 40

// WriteTo writes f in the binary format (see format.go). It streams the table
// and never copies it whole. Keys acknowledged before WriteTo was called are in
// the output; keys added concurrently may or may not be.
func (f *Bloom) WriteTo(w io.Writer) (int64, error) {
	fw := newFrameWriter(w)
	fw.header(KindBloom, f.seed, bloomParamsLen)
	fw.geom(blockedGeom{f.capacity, f.fpRate, f.blocks, f.k})
	fw.u64(f.items.Load())
	fw.u64(uint64(len(f.words)) * 8)
	fw.words(f.words)
	return fw.finish()
}

// DecodeBloom reads a Bloom written by WriteTo. Input of another kind returns
// ErrKindMismatch; truncated or damaged input returns ErrCorrupt.
func DecodeBloom(r io.Reader, cfg DecodeConfig) (*Bloom, error) {
	fr, err := openFrame(r, cfg, KindBloom)
	if err != nil {
		return nil, err
	}
	return decodeBloomBody(fr)
}

func decodeBloomBody(fr *frameReader) (*Bloom, error) {
	if fr.paramsLen != bloomParamsLen {
		return nil, fmt.Errorf("%w: bloom parameter block is %d bytes, want %d", ErrCorrupt, fr.paramsLen, bloomParamsLen)
	}
	g, err := fr.geom(checkBlocks)
	if err != nil {
		return nil, err
	}
	items := fr.u64()
	words, err := fr.table(g.blocks, blockWords)
	if err != nil {
		return nil, err
	}
	adviseHuge(words, true) // already written: collapse into huge pages now
	f := &Bloom{words: words, blocks: g.blocks, k: g.k, seed: fr.seed, capacity: g.capacity, fpRate: g.fpRate}
	f.items.Store(items)
	return f, nil
}
