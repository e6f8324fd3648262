package filter

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync/atomic"
)

// CountingConfig configures NewCounting.
type CountingConfig struct {
	// Capacity is the number of distinct keys the filter is sized for.
	// Required; must be > 0. More keys raise the false-positive rate above
	// FPRate but never cause false negatives.
	Capacity uint64
	// FPRate is the target false-positive rate at Capacity.
	// Default: DefaultFPRate (0.1 %).
	FPRate float64
	// Seed seeds the key hash. Default: 0.
	Seed uint64
}

// Counting layout: a block is 256 four-bit counters, 16 per 64-bit word, so
// 16 words = 128 bytes = two cache lines. Every counter of a key is in one
// block.
const (
	countingSlots      = 256
	countingBlockWords = countingSlots * 4 / 64
	counterMax         = 15
	// countingParamsLen is the size of the Counting parameter block:
	// capacity u64, fp rate f64, blocks u64, k u32, reserved u32, items u64,
	// remove misses u64.
	countingParamsLen = 48
)

// Counting is a counting Bloom filter (Fan, Cao, Almeida, Broder 2000): a
// Bloom filter whose bits are 4-bit counters, so keys can be removed. It uses
// four times the memory of a Bloom filter with the same number of slots.
//
// Layout: blocked like Bloom. The top 32 bits of the key's hash choose a block
// of 256 counters (128 bytes, two cache lines) by multiply-shift; the K
// counter positions come from the same hash. The false-positive math is a
// blocked Bloom filter's with 256-slot blocks, and the filter is sized with it
// (see SizeBloom) so that the rate at capacity meets the target.
//
// Add increments K counters; a counter at 15 is saturated and is never
// incremented or decremented again, which keeps the filter free of false
// negatives however often a slot is shared. Remove decrements them. Removing a
// key that was never added is the caller's error and can cause false
// negatives for other keys; Remove guards against the common case: if one of
// the key's counters is zero, the key is certainly absent, nothing is
// decremented and Remove returns ErrNotFound (counted in Stats.RemoveMisses).
//
// A Counting is safe for concurrent use without locks: counters change by
// compare-and-swap on their word, MayContain reads words atomically and never
// blocks. Once Add(key) returns, MayContain(key) is true on every goroutine
// until a Remove(key) that matches it, provided every Remove matches an
// earlier Add.
type Counting struct {
	words        []uint64 // blocks × countingBlockWords
	blocks       uint64
	k            uint32
	seed         uint64
	capacity     uint64
	fpRate       float64
	items        atomic.Int64
	removeMisses atomic.Uint64
}

var _ Filter = (*Counting)(nil)

// NewCounting returns an empty counting filter sized for cfg.
func NewCounting(cfg CountingConfig) (*Counting, error) {
	if cfg.FPRate == 0 {
		cfg.FPRate = DefaultFPRate
	}
	blocks, k, err := sizeBlocked(cfg.Capacity, cfg.FPRate, countingSlots)
	if err != nil {
		return nil, err
	}
	if err := checkCountingBlocks(blocks); err != nil {
		return nil, err
	}
	return &Counting{
		words:    make([]uint64, blocks*countingBlockWords),
		blocks:   blocks,
		k:        uint32(k),
		seed:     cfg.Seed,
		capacity: cfg.Capacity,
		fpRate:   cfg.FPRate,
	}, nil
}

func checkCountingBlocks(blocks uint64) error {
	if blocks > maxBlocks || blocks > uint64(math.MaxInt/countingBlockWords) {
		return fmt.Errorf("%w: %d counting blocks (%d bytes) exceeds the limit of %d blocks", ErrTooLarge, blocks, blocks*countingBlockWords*8, uint64(maxBlocks))
	}
	return nil
}

// Seed returns the hash seed.
func (f *Counting) Seed() uint64 { return f.seed }

// Hash returns the hash of key under this filter's seed, for AddHash,
// RemoveHash and MayContainHash.
func (f *Counting) Hash(key []byte) uint64 { return Hash(key, f.seed) }

// Add inserts key. It always returns nil: a Counting takes any number of
// keys (past Capacity the false-positive rate rises above FPRate), and from
// then on MayContain(key) is true until a Remove of the key.
func (f *Counting) Add(key []byte) error { f.addHash(Hash(key, f.seed)); return nil }

// AddString is Add for a string key. It always returns nil.
func (f *Counting) AddString(key string) error { f.addHash(HashString(key, f.seed)); return nil }

// Remove deletes one earlier Add of key. It returns ErrNotFound, and removes
// nothing, when the key is certainly absent.
func (f *Counting) Remove(key []byte) error { return f.RemoveHash(Hash(key, f.seed)) }

// RemoveString is Remove for a string key.
func (f *Counting) RemoveString(key string) error { return f.RemoveHash(HashString(key, f.seed)) }

// Items returns the successful Adds (duplicates counted) minus the
// successful Removes. It reads a counter, not the table.
func (f *Counting) Items() uint64 { return uint64(max(f.items.Load(), 0)) }

// Bytes returns the memory held by the counters.
func (f *Counting) Bytes() uint64 { return uint64(len(f.words)) * 8 }

// MayContain reports whether key may be in the filter.
func (f *Counting) MayContain(key []byte) bool { return f.MayContainHash(Hash(key, f.seed)) }

// MayContainString reports whether key may be in the filter.
func (f *Counting) MayContainString(key string) bool {
	return f.MayContainHash(HashString(key, f.seed))
}

// block returns the counter block for h, chosen by the top 32 bits of h.
func (f *Counting) block(h uint64) *[countingBlockWords]uint64 {
	i := (h >> 32) * f.blocks >> 32
	return (*[countingBlockWords]uint64)(f.words[i*countingBlockWords:])
}

// probe returns the word and bit shift of the next counter: g is multiplied
// by an odd constant and its top 8 bits pick one of 256 counters (as Bloom).
func probe(g uint64) (word, shift uint64) {
	pos := g >> (64 - 8)
	return pos >> 4, (pos & 15) * 4
}

// AddHash is Add for a key's hash (see Hash). It always returns nil.
func (f *Counting) AddHash(h uint64) error { f.addHash(h); return nil }

func (f *Counting) addHash(h uint64) {
	b := f.block(h)
	g := h
	for i := f.k; i > 0; i-- {
		g *= probeMul
		w, s := probe(g)
		increment(&b[w&(countingBlockWords-1)], s)
	}
	f.items.Add(1)
}

// MayContainHash reports whether the key with hash h may be in the filter.
func (f *Counting) MayContainHash(h uint64) bool {
	b := f.block(h)
	g := h
	for i := f.k; i > 0; i-- {
		g *= probeMul
		w, s := probe(g)
		if atomic.LoadUint64(&b[w&(countingBlockWords-1)])>>s&counterMax == 0 {
			return false
		}
	}
	return true
}

// RemoveHash removes a key by its hash. See Remove.
//
// It first checks that none of the key's counters is zero. Only a Remove out
// of step with the Adds can find one at zero while decrementing (another
// Remove got there first); it then restores the counters it already
// decremented and returns ErrNotFound.
func (f *Counting) RemoveHash(h uint64) error {
	b := f.block(h)
	g := h
	for i := f.k; i > 0; i-- {
		g *= probeMul
		w, s := probe(g)
		if atomic.LoadUint64(&b[w&(countingBlockWords-1)])>>s&counterMax == 0 {
			f.removeMisses.Add(1)
			return ErrNotFound
		}
	}
	var done uint64 // bit i: probe i was decremented (not saturated)
	g = h
	for i := range f.k {
		g *= probeMul
		w, s := probe(g)
		dec, ok := decrement(&b[w&(countingBlockWords-1)], s)
		if !ok {
			g = h
			for j := range i {
				g *= probeMul
				if done>>j&1 != 0 {
					w, s := probe(g)
					increment(&b[w&(countingBlockWords-1)], s)
				}
			}
			f.removeMisses.Add(1)
			return ErrNotFound
		}
		if dec {
			done |= 1 << i
		}
	}
	f.items.Add(-1)
	return nil
}

// increment adds one to the counter at shift in *w unless it is saturated.
func increment(w *uint64, shift uint64) {
	for {
		old := atomic.LoadUint64(w)
		if old>>shift&counterMax == counterMax {
			return
		}
		if atomic.CompareAndSwapUint64(w, old, old+1<<shift) {
			return
		}
	}
}

// decrement subtracts one from the counter at shift in *w unless it is
// saturated (dec = false) or zero (ok = false).
func decrement(w *uint64, shift uint64) (dec, ok bool) {
	for {
		old := atomic.LoadUint64(w)
		switch old >> shift & counterMax {
		case counterMax:
			return false, true
		case 0:
			return false, false
		}
		if atomic.CompareAndSwapUint64(w, old, old-1<<shift) {
			return true, true
		}
	}
}

// nonzeroNibbles counts the non-zero 4-bit counters in w.
func nonzeroNibbles(w uint64) int {
	w |= w >> 1
	w |= w >> 2
	return bits.OnesCount64(w & 0x1111111111111111)
}

// Stats reports the filter's size and fill. Items is Add calls minus
// successful Remove calls; FillRatio is the fraction of non-zero counters.
// It reads the whole table, so it costs O(size).
func (f *Counting) Stats() Stats {
	var used uint64
	var fp, distinct float64
	k := float64(f.k)
	for i := 0; i < len(f.words); i += countingBlockWords {
		c := 0
		for j := range countingBlockWords {
			c += nonzeroNibbles(atomic.LoadUint64(&f.words[i+j]))
		}
		used += uint64(c)
		fp += math.Pow(float64(c)/countingSlots, k)
		distinct += -countingSlots / k * math.Log1p(-min(float64(c), countingSlots-1)/countingSlots)
	}
	slots := f.blocks * countingSlots
	return Stats{
		Kind:              KindCounting,
		Capacity:          f.capacity,
		TargetFPRate:      f.fpRate,
		Items:             uint64(max(f.items.Load(), 0)),
		EstimatedDistinct: distinct,
		Bytes:             uint64(len(f.words)) * 8,
		Bits:              uint64(len(f.words)) * 64,
		K:                 int(f.k),
		FillRatio:         float64(used) / float64(slots),
		EstimatedFPRate:   fp / float64(f.blocks),
		RemoveMisses:      f.removeMisses.Load(),
	}
}

// WriteTo writes f in the binary format (see format.go); the payload is the
// counter words. Keys acknowledged before WriteTo was called and not removed
// meanwhile are in the output.
func (f *Counting) WriteTo(w io.Writer) (int64, error) {
	fw := newFrameWriter(w)
	fw.header(KindCounting, f.seed, countingParamsLen)
	fw.geom(blockedGeom{f.capacity, f.fpRate, f.blocks, f.k})
	fw.u64(uint64(max(f.items.Load(), 0)))
	fw.u64(f.removeMisses.Load())
	fw.u64(uint64(len(f.words)) * 8)
	fw.words(f.words)
	return fw.finish()
}

// DecodeCounting reads a Counting written by WriteTo. Input of another kind
// returns ErrKindMismatch; truncated or damaged input returns ErrCorrupt.
func DecodeCounting(r io.Reader, cfg DecodeConfig) (*Counting, error) {
	fr, err := openFrame(r, cfg, KindCounting)
	if err != nil {
		return nil, err
	}
	return decodeCountingBody(fr)
}

func decodeCountingBody(fr *frameReader) (*Counting, error) {
	if fr.paramsLen != countingParamsLen {
		return nil, fmt.Errorf("%w: counting parameter block is %d bytes, want %d", ErrCorrupt, fr.paramsLen, countingParamsLen)
	}
	g, err := fr.geom(checkCountingBlocks)
	if err != nil {
		return nil, err
	}
	items := fr.u64()
	misses := fr.u64()
	if fr.err == nil && items > math.MaxInt64 {
		return nil, fmt.Errorf("%w: %d items", ErrCorrupt, items)
	}
	words, err := fr.table(g.blocks, countingBlockWords)
	if err != nil {
		return nil, err
	}
	f := &Counting{words: words, blocks: g.blocks, k: g.k, seed: fr.seed, capacity: g.capacity, fpRate: g.fpRate}
	f.items.Store(int64(items))
	f.removeMisses.Store(misses)
	return f, nil
}
