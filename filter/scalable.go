package filter

import (
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
)

// ScalableConfig configures NewScalable. The zero value of every field but
// InitialCapacity means its default.
type ScalableConfig struct {
	// InitialCapacity is the number of distinct keys the first sub-filter
	// holds. Default (zero): 10,000. Every lookup of an absent key probes
	// every sub-filter, so set it near the expected size when that is known.
	InitialCapacity uint64
	// FPRate bounds the false-positive rate of the whole filter, however far
	// it grows. Default: DefaultFPRate (0.1 %).
	FPRate float64
	// Expansion is how many times larger each new sub-filter is than the
	// one before. Default (zero): 2. 4 suits sets that grow by orders of
	// magnitude (fewer sub-filters to probe, like pybloom-live's
	// LARGE_SET_GROWTH). Must be in [1, 64].
	Expansion uint32
	// TightenRatio r scales each new sub-filter's false-positive target:
	// sub-filter i gets FPRate·(1−r)·r^i, so the sum over all sub-filters,
	// which bounds the filter's rate, stays below FPRate. Default (zero):
	// 0.5, as RedisBloom. Must be in (0, 1). Larger ratios (0.8–0.9, as
	// Almeida et al. 2007 suggest) need less memory once the filter has grown
	// many times: 10,000 → 10 M keys at 1 % takes 2.8× the memory of a
	// Bloom sized for 10 M up front with r = 0.5, 1.9× with r = 0.8.
	TightenRatio float64
	// NoScale makes Add return ErrFull once the first sub-filter holds
	// InitialCapacity keys, instead of growing. Default: false (grow).
	NoScale bool
	// Seed seeds the key hash. Default: 0.
	Seed uint64
}

const (
	defaultScalableCapacity = 10_000
	maxExpansion            = 64
	// maxSubFilters bounds how many sub-filters a Scalable grows to, and
	// how many a decoder accepts.
	maxSubFilters = 64
	// scalableParamsLen is the size of the Scalable parameter block:
	// initial capacity u64, fp rate f64, tighten ratio f64, expansion u32,
	// flags u32, sub-filters u32, reserved u32, items u64.
	scalableParamsLen = 48
	scalableNoScale   = 1 // flags bit
	// bloomFrameOverhead is a Bloom frame's size beyond its table.
	bloomFrameOverhead = 20 + bloomParamsLen + 8 + 4
)

// Scalable is a scalable Bloom filter (Almeida, Baquero, Preguiça, Hutchison
// 2007): a list of blocked Bloom sub-filters. Keys go into the newest one;
// when it holds its capacity, a sub-filter Expansion times larger with a
// false-positive target TightenRatio times smaller is added. The rates form a
// geometric series whose sum, FPRate, bounds the rate of the whole filter.
//
// Add hashes a key once and skips it when the filter may already hold it, so
// duplicates do not use capacity. A lookup probes every sub-filter, newest
// first.
//
// A Scalable is safe for concurrent use. MayContain never blocks: it loads the
// list of sub-filters (published with an atomic pointer) and reads their
// words atomically. Add takes a mutex only when the newest sub-filter is full
// and a new one must be built; concurrent Adds then wait for it. Each
// sub-filter counts its keys atomically and never takes more than its
// capacity, so concurrency cannot push the rate above the bound. Once Add
// returns nil, MayContain(key) is true on every goroutine.
type Scalable struct {
	state     atomic.Pointer[scalableState]
	grow      sync.Mutex // held only while adding a sub-filter
	items     atomic.Uint64
	seed      uint64
	initial   uint64
	fpRate    float64
	ratio     float64
	expansion uint32
	noScale   bool
}

// scalableState is an immutable list of sub-filters, oldest first.
type scalableState struct {
	subs []*scalableSub
}

type scalableSub struct {
	*Bloom
	// reserved counts keys that claimed a place in this sub-filter; those
	// past capacity give it back and trigger growth.
	reserved atomic.Uint64
}

var _ Filter = (*Scalable)(nil)

// NewScalable returns an empty scalable filter holding one sub-filter.
func NewScalable(cfg ScalableConfig) (*Scalable, error) {
	if cfg.InitialCapacity == 0 {
		cfg.InitialCapacity = defaultScalableCapacity
	}
	if cfg.FPRate == 0 {
		cfg.FPRate = DefaultFPRate
	}
	if cfg.Expansion == 0 {
		cfg.Expansion = 2
	}
	if cfg.TightenRatio == 0 {
		cfg.TightenRatio = 0.5
	}
	if err := checkScalableParams(cfg.FPRate, cfg.TightenRatio, cfg.Expansion); err != nil {
		return nil, err
	}
	s, err := SizeBloom(cfg.InitialCapacity, cfg.FPRate*(1-cfg.TightenRatio))
	if err != nil {
		return nil, err
	}
	f := &Scalable{
		seed:      cfg.Seed,
		initial:   cfg.InitialCapacity,
		fpRate:    cfg.FPRate,
		ratio:     cfg.TightenRatio,
		expansion: cfg.Expansion,
		noScale:   cfg.NoScale,
	}
	f.state.Store(&scalableState{subs: []*scalableSub{{Bloom: newBloom(s, cfg.Seed)}}})
	return f, nil
}

func checkScalableParams(p, r float64, e uint32) error {
	switch {
	case !(p > 0 && p < 1):
		return fmt.Errorf("%w: false-positive rate %v outside (0, 1)", ErrInvalidParams, p)
	case !(r > 0 && r < 1):
		return fmt.Errorf("%w: tighten ratio %v outside (0, 1)", ErrInvalidParams, r)
	case e < 1 || e > maxExpansion:
		return fmt.Errorf("%w: expansion %d outside [1, %d]", ErrInvalidParams, e, maxExpansion)
	}
	return nil
}

// Seed returns the hash seed.
func (f *Scalable) Seed() uint64 { return f.seed }

// Hash returns the hash of key under this filter's seed, for AddHash and
// MayContainHash.
func (f *Scalable) Hash(key []byte) uint64 { return Hash(key, f.seed) }

// Items returns the successful Adds, duplicates counted (a duplicate uses no
// capacity but is counted). It reads a counter, not the tables.
func (f *Scalable) Items() uint64 { return f.items.Load() }

// Bytes returns the memory held by the sub-filters' tables. It reads no
// table.
func (f *Scalable) Bytes() uint64 {
	var n uint64
	for _, s := range f.state.Load().subs {
		n += s.Bloom.Bytes()
	}
	return n
}

// Filters returns the number of sub-filters.
func (f *Scalable) Filters() int { return len(f.state.Load().subs) }

// Add inserts key. After it returns nil, MayContain(key) is true for the
// filter's whole life. It returns an error wrapping ErrFull when the filter is
// full and may not (NoScale) or cannot grow: the key was then not added and
// the filter is unchanged.
func (f *Scalable) Add(key []byte) error { return f.AddHash(Hash(key, f.seed)) }

// AddString is Add for a string key.
func (f *Scalable) AddString(key string) error { return f.AddHash(HashString(key, f.seed)) }

// MayContain reports whether key may be in the filter.
func (f *Scalable) MayContain(key []byte) bool { return f.MayContainHash(Hash(key, f.seed)) }

// MayContainString reports whether key may be in the filter.
func (f *Scalable) MayContainString(key string) bool {
	return f.MayContainHash(HashString(key, f.seed))
}

// MayContainHash reports whether the key with hash h may be in the filter.
func (f *Scalable) MayContainHash(h uint64) bool {
	return f.state.Load().mayContain(h)
}

// MayContainHashMany is MayContainHash for many hashes: out[i] reports what
// MayContainHash(hs[i]) would, and it returns how many may be present. The
// blocks of the next group of hashes are fetched from every sub-filter while
// this group is looked up, so their cache misses overlap. It panics if
// len(out) < len(hs) and does not allocate; every key whose Add returned
// before the call is reported present.
func (f *Scalable) MayContainHashMany(hs []uint64, out []bool) int {
	out = out[:len(hs)]
	st := f.state.Load()
	st.prefetch(hs[:min(len(hs), hashGroup)])
	n := 0
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		st.prefetch(hs[end:min(end+hashGroup, len(hs))])
		for j := i; j < end; j++ {
			out[j] = st.mayContain(hs[j])
			if out[j] {
				n++
			}
		}
	}
	return n
}

// prefetch starts loading the blocks of hs in every sub-filter.
func (st *scalableState) prefetch(hs []uint64) {
	for _, s := range st.subs {
		s.prefetch(hs)
	}
}

func (st *scalableState) mayContain(h uint64) bool {
	// Newest first: the newest sub-filter holds about half of the keys.
	for i := len(st.subs) - 1; i >= 0; i-- {
		if st.subs[i].MayContainHash(h) {
			return true
		}
	}
	return false
}

// AddHash inserts a key by its hash (see Hash). See Add.
func (f *Scalable) AddHash(h uint64) error {
	if _, err := f.addAbsent(h); err != nil {
		return err
	}
	f.items.Add(1)
	return nil
}

// AddAbsentHashes adds, in order, each of hs the filter may not hold yet
// (as AddHash would; a hash repeated in hs is added once), and reports in
// added[i] whether hs[i] was added. Unlike AddHash it counts in Items only
// the hashes it added, so a caller that counts distinct keys (BF.CARD) can
// keep its count and Items equal. It returns how many of hs it went through:
// all of them, or, with an error wrapping ErrFull, the index of the hash the
// filter refused (added[:n] holds the answers; the hashes from n on were
// not looked at). It panics if len(added) < len(hs) and does not allocate.
//
// The blocks of the next group of hashes are fetched from every sub-filter
// while this group is looked up and added, so their cache misses overlap;
// the answers are those of one AddHash after the other.
func (f *Scalable) AddAbsentHashes(hs []uint64, added []bool) (int, error) {
	added = added[:len(hs)]
	var n uint64
	f.state.Load().prefetch(hs[:min(len(hs), hashGroup)])
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		f.state.Load().prefetch(hs[end:min(end+hashGroup, len(hs))])
		for j := i; j < end; j++ {
			a, err := f.addAbsent(hs[j])
			if err != nil {
				f.items.Add(n)
				return j, err
			}
			added[j] = a
			if a {
				n++
			}
		}
	}
	f.items.Add(n)
	return len(hs), nil
}

// addAbsent adds h unless the filter may hold it, and reports whether it
// did. It does not count h in f.items.
func (f *Scalable) addAbsent(h uint64) (bool, error) {
	for {
		st := f.state.Load()
		if st.mayContain(h) {
			return false, nil
		}
		cur := st.subs[len(st.subs)-1]
		if cur.reserved.Add(1) <= cur.capacity {
			cur.AddHash(h)
			return true, nil
		}
		cur.reserved.Add(^uint64(0)) // give the place back
		if err := f.addSub(st); err != nil {
			return false, err
		}
	}
}

// addSub adds a sub-filter after the newest of st, unless another goroutine
// already did.
func (f *Scalable) addSub(st *scalableState) error {
	f.grow.Lock()
	defer f.grow.Unlock()
	if f.state.Load() != st {
		return nil // grown meanwhile
	}
	last := st.subs[len(st.subs)-1]
	if f.noScale {
		return fmt.Errorf("%w: %d keys (NoScale)", ErrFull, last.capacity)
	}
	if len(st.subs) >= maxSubFilters {
		return fmt.Errorf("%w: %d sub-filters", ErrFull, len(st.subs))
	}
	hi, capacity := bits.Mul64(last.capacity, uint64(f.expansion))
	if hi != 0 {
		return fmt.Errorf("%w: capacity overflows", ErrFull)
	}
	s, err := SizeBloom(capacity, last.fpRate*f.ratio)
	if err != nil {
		return fmt.Errorf("%w: cannot grow: %w", ErrFull, err)
	}
	subs := make([]*scalableSub, len(st.subs), len(st.subs)+1)
	copy(subs, st.subs)
	f.state.Store(&scalableState{subs: append(subs, &scalableSub{Bloom: newBloom(s, f.seed)})})
	return nil
}

// Stats sums capacity, size and fill over the sub-filters. Items counts
// successful Add calls, duplicates included; K is the newest sub-filter's;
// EstimatedFPRate is 1−Π(1−p_i) over the sub-filters' estimates. It reads every
// table, so it costs O(size).
func (f *Scalable) Stats() Stats {
	st := f.state.Load()
	out := Stats{Kind: KindScalable, TargetFPRate: f.fpRate, Items: f.items.Load()}
	var set float64
	pass := 1.0
	for _, s := range st.subs {
		ss := s.Stats()
		out.Capacity += ss.Capacity
		out.EstimatedDistinct += ss.EstimatedDistinct
		out.Bytes += ss.Bytes
		out.Bits += ss.Bits
		out.K = ss.K
		set += ss.FillRatio * float64(ss.Bits)
		pass *= 1 - ss.EstimatedFPRate
	}
	out.FillRatio = set / float64(out.Bits)
	out.EstimatedFPRate = 1 - pass
	return out
}

// WriteTo writes f in the binary format: the parameters, then each
// sub-filter as a complete Bloom frame with its own checksum, all under the
// outer checksum. Keys acknowledged before WriteTo was called are in the
// output; keys added concurrently may or may not be.
func (f *Scalable) WriteTo(w io.Writer) (int64, error) {
	st := f.state.Load()
	items := f.items.Load()
	var payload uint64
	for _, s := range st.subs {
		payload += bloomFrameOverhead + uint64(len(s.words))*8
	}
	var flags uint32
	if f.noScale {
		flags |= scalableNoScale
	}
	fw := newFrameWriter(w)
	fw.header(KindScalable, f.seed, scalableParamsLen)
	fw.u64(f.initial)
	fw.u64(math.Float64bits(f.fpRate))
	fw.u64(math.Float64bits(f.ratio))
	fw.u32(f.expansion)
	fw.u32(flags)
	fw.u32(uint32(len(st.subs)))
	fw.u32(0)
	fw.u64(items)
	fw.u64(payload)
	for _, s := range st.subs {
		if _, err := s.WriteTo(fw); err != nil {
			return fw.n, err
		}
	}
	return fw.finish()
}

// DecodeScalable reads a Scalable written by WriteTo. Input of another kind
// returns ErrKindMismatch; truncated, damaged or inconsistent input returns
// ErrCorrupt.
func DecodeScalable(r io.Reader, cfg DecodeConfig) (*Scalable, error) {
	fr, err := openFrame(r, cfg, KindScalable)
	if err != nil {
		return nil, err
	}
	return decodeScalableBody(fr)
}

func decodeScalableBody(fr *frameReader) (*Scalable, error) {
	if fr.paramsLen != scalableParamsLen {
		return nil, fmt.Errorf("%w: scalable parameter block is %d bytes, want %d", ErrCorrupt, fr.paramsLen, scalableParamsLen)
	}
	initial := fr.u64()
	fpRate := math.Float64frombits(fr.u64())
	ratio := math.Float64frombits(fr.u64())
	expansion := fr.u32()
	flags := fr.u32()
	n := fr.u32()
	reserved := fr.u32()
	items := fr.u64()
	payload := fr.u64()
	if fr.err != nil {
		return nil, fr.err
	}
	if err := checkScalableParams(fpRate, ratio, expansion); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	}
	switch {
	case initial == 0:
		return nil, fmt.Errorf("%w: zero initial capacity", ErrCorrupt)
	case flags&^scalableNoScale != 0 || reserved != 0:
		return nil, fmt.Errorf("%w: unknown flags or reserved field set", ErrCorrupt)
	case n == 0 || n > maxSubFilters:
		return nil, fmt.Errorf("%w: %d sub-filters", ErrCorrupt, n)
	case flags&scalableNoScale != 0 && n != 1:
		return nil, fmt.Errorf("%w: %d sub-filters in a NoScale filter", ErrCorrupt, n)
	case payload < uint64(n)*(bloomFrameOverhead+blockBits/8):
		return nil, fmt.Errorf("%w: payload of %d bytes for %d sub-filters", ErrCorrupt, payload, n)
	case payload > fr.maxBytes:
		return nil, fmt.Errorf("%w: payload of %d bytes exceeds the limit of %d", ErrTooLarge, payload, fr.maxBytes)
	}
	f := &Scalable{
		seed:      fr.seed,
		initial:   initial,
		fpRate:    fpRate,
		ratio:     ratio,
		expansion: expansion,
		noScale:   flags&scalableNoScale != 0,
	}
	f.items.Store(items)
	subs := make([]*scalableSub, 0, n)
	body := fr.nested(payload)
	capacity, subRate := initial, fpRate*(1-ratio)
	for i := range n {
		if i > 0 {
			var hi uint64
			if hi, capacity = bits.Mul64(capacity, uint64(expansion)); hi != 0 {
				return nil, fmt.Errorf("%w: sub-filter %d capacity overflows", ErrCorrupt, i)
			}
			subRate *= ratio
		}
		b, err := decodeSub(body, fr.maxBytes)
		if err != nil {
			return nil, fmt.Errorf("sub-filter %d: %w", i, err)
		}
		switch {
		case b.seed != fr.seed:
			return nil, fmt.Errorf("%w: sub-filter %d has seed %d, filter %d", ErrCorrupt, i, b.seed, fr.seed)
		case b.capacity != capacity || b.fpRate != subRate:
			return nil, fmt.Errorf("%w: sub-filter %d sized for %d keys at %g, want %d at %g", ErrCorrupt, i, b.capacity, b.fpRate, capacity, subRate)
		case b.Sizing().FPRateAt(capacity) > subRate:
			return nil, fmt.Errorf("%w: sub-filter %d too small for its target", ErrCorrupt, i)
		case b.items.Load() > capacity:
			return nil, fmt.Errorf("%w: sub-filter %d holds %d keys, capacity %d", ErrCorrupt, i, b.items.Load(), capacity)
		}
		s := &scalableSub{Bloom: b}
		s.reserved.Store(b.items.Load())
		subs = append(subs, s)
	}
	if body.left != 0 {
		return nil, fmt.Errorf("%w: %d payload bytes after the last sub-filter", ErrCorrupt, body.left)
	}
	if err := fr.finish(); err != nil {
		return nil, err
	}
	f.state.Store(&scalableState{subs: subs})
	return f, nil
}

// decodeSub reads one sub-filter frame from a Scalable's payload.
func decodeSub(r *nestedReader, maxBytes uint64) (*Bloom, error) {
	fr, err := openFrame(r, DecodeConfig{MaxBytes: maxBytes}, KindBloom)
	if err != nil {
		if errors.Is(err, ErrKindMismatch) {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
		return nil, err
	}
	return decodeBloomBody(fr)
}
