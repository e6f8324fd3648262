package filter

import (
	"fmt"
	"io"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Time-windowed filter.
//
// Time is cut into windows of W = ⌈MaxTTL/(G − 1)⌉ nanoseconds, aligned to
// the Unix epoch: window k covers expiry times in ((k−1)·W, k·W]. A key that
// must be remembered until e goes into the generation (a blocked Bloom filter)
// of the window holding e, whose end k·W ≥ e. Once the clock passes a window's
// end, every key in it has expired and the generation is dropped whole: no
// per-key deletes, and memory follows the keys still live.
//
// Expiries lie in [now, now + MaxTTL], which spans at most
// ⌈MaxTTL/W⌉ + 1 ≤ G windows, so at most G generations are live. (If the clock
// steps back, a new key may instead join the live generation with the
// smallest end after its expiry, which keeps it long enough and keeps the
// count at G.)
//
// A lookup checks every live generation, so the rates compound: with G
// generations at rate p_gen each, an absent key is reported present with
// probability 1 − (1 − p_gen)^G. Each generation is sized for
//
//	p_gen = 1 − (1 − p)^(1/G)
//
// so that the compound rate stays within FPRate = p (for the default
// p = 0.1 % and G = 8, p_gen ≈ 0.0125 %).

const (
	windowedDefaultGens = 8
	windowedMaxGens     = 256
	// windowedMaxTTL bounds MaxTTL so that expiry times in Unix
	// nanoseconds cannot overflow.
	windowedMaxTTL = 10 * 366 * 24 * time.Hour
	// windowedMaxUnix bounds the clock (in Unix seconds, ±247 years) for
	// the same reason.
	windowedMaxUnix = 7_800_000_000
)

// WindowedConfig configures NewWindowed.
type WindowedConfig struct {
	// MaxTTL is the longest a key can be remembered: Add rejects an
	// expiry further than MaxTTL ahead (and takes a zero expiry to mean
	// now + MaxTTL). Required; at most ten years.
	MaxTTL time.Duration
	// Generations is the number of live generations G, each a Bloom filter
	// covering a window of MaxTTL/(G − 1). More generations drop expired
	// keys sooner (memory tracks the live keys more closely) but each
	// lookup checks more filters. Default (zero): 8. Between 2 and 256.
	Generations int
	// Capacity is the number of keys one window is sized for: the keys
	// whose expiries fall within one window of MaxTTL/(G − 1). Adding
	// R keys per second, all with the same TTL, fills a window with
	// R·MaxTTL/(G − 1) keys. More keys raise the false-positive rate, never
	// cause false negatives. Required; must be > 0.
	Capacity uint64
	// FPRate is the target false-positive rate of a lookup across all live
	// generations. Default: DefaultFPRate (0.1 %).
	FPRate float64
	// Seed seeds the key hash. Default: 0.
	Seed uint64
	// Now is the clock. Default (nil): time.Now. Tests inject a fake one.
	Now func() time.Time
}

// Windowed remembers keys until an expiry time, for sets whose members expire,
// such as revoked tokens, which only need to be remembered until the token
// itself expires. Every Add takes the key's expiry, and keys are forgotten
// after it, so a Windowed is not a drop-in replacement for the other
// families, which keep an added key for the filter's whole life: its Add
// methods take an expiry and it has no AddHash(uint64) error.
//
// After Add(key, e) returns nil, MayContain(key) is true on every goroutine
// at every time (read from Now) up to and including e. At any time after the
// end of the window holding e, which is less than one Window after e, the
// key's entry is no longer consulted (it can still be reported present as a
// false positive, like any absent key), whether or not anything was added or
// Expire called meanwhile. The one exception is a clock stepped back: a key added
// then may join a generation whose window ends later (see the top of
// windowed.go), and is forgotten at that window's end. Memory is bounded by G
// generations of Capacity keys each, however long the filter runs.
//
// A Windowed is safe for concurrent use. MayContain never locks: the list of
// generations is published through an atomic pointer, and each generation is
// a Bloom filter with atomic bits. Add locks only when it must create or drop
// a generation (once per window); otherwise it sets bits like Bloom.Add.
type Windowed struct {
	mu   sync.Mutex // serialises changes to the generation list
	gens atomic.Pointer[[]*generation]

	maxTTL   time.Duration
	window   int64 // W in nanoseconds
	g        int
	capacity uint64
	fpRate   float64
	sizing   Sizing // of each generation
	seed     uint64
	now      func() time.Time
}

var _ Filter = (*Windowed)(nil)

// generation holds the keys whose expiry is ≤ end and > end − W.
type generation struct {
	end   int64 // Unix nanoseconds
	bloom *Bloom
}

// windowedGenRate returns p_gen = 1 − (1 − p)^(1/g).
func windowedGenRate(p float64, g int) float64 {
	return -math.Expm1(math.Log1p(-p) / float64(g))
}

func windowedWindow(maxTTL time.Duration, g int) int64 {
	return (int64(maxTTL) + int64(g) - 2) / int64(g-1)
}

// NewWindowed returns an empty windowed filter for cfg.
func NewWindowed(cfg WindowedConfig) (*Windowed, error) {
	w, err := newWindowed(cfg)
	if err != nil {
		return nil, err
	}
	if w.sizing, err = SizeBloom(w.capacity, windowedGenRate(w.fpRate, w.g)); err != nil {
		return nil, err
	}
	return w, nil
}

// SizeWindowed returns the geometry of each generation of a Windowed with
// the given capacity per window, target rate and generations (zero rate or
// generations: the defaults), as NewWindowed would size it.
func SizeWindowed(capacity uint64, fpRate float64, generations int) (Sizing, error) {
	if generations == 0 {
		generations = windowedDefaultGens
	}
	if fpRate == 0 {
		fpRate = DefaultFPRate
	}
	if generations < 2 || generations > windowedMaxGens || math.IsNaN(fpRate) || fpRate <= 0 || fpRate >= 1 {
		return Sizing{}, fmt.Errorf("%w: %d generations, false-positive rate %v", ErrInvalidParams, generations, fpRate)
	}
	return SizeBloom(capacity, windowedGenRate(fpRate, generations))
}

// newWindowed fills in cfg's defaults and validates it; the caller sets the
// generations' sizing.
func newWindowed(cfg WindowedConfig) (*Windowed, error) {
	if cfg.Generations == 0 {
		cfg.Generations = windowedDefaultGens
	}
	if cfg.FPRate == 0 {
		cfg.FPRate = DefaultFPRate
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	switch {
	case cfg.MaxTTL <= 0 || cfg.MaxTTL > windowedMaxTTL:
		return nil, fmt.Errorf("%w: MaxTTL %v outside (0, %v]", ErrInvalidParams, cfg.MaxTTL, windowedMaxTTL)
	case cfg.Generations < 2 || cfg.Generations > windowedMaxGens:
		return nil, fmt.Errorf("%w: %d generations outside [2, %d]", ErrInvalidParams, cfg.Generations, windowedMaxGens)
	case cfg.Capacity == 0:
		return nil, fmt.Errorf("%w: capacity must be > 0", ErrInvalidParams)
	case math.IsNaN(cfg.FPRate) || cfg.FPRate <= 0 || cfg.FPRate >= 1:
		return nil, fmt.Errorf("%w: false-positive rate %v outside (0, 1)", ErrInvalidParams, cfg.FPRate)
	}
	w := &Windowed{
		maxTTL:   cfg.MaxTTL,
		window:   windowedWindow(cfg.MaxTTL, cfg.Generations),
		g:        cfg.Generations,
		capacity: cfg.Capacity,
		fpRate:   cfg.FPRate,
		seed:     cfg.Seed,
		now:      cfg.Now,
	}
	w.gens.Store(new([]*generation))
	return w, nil
}

// Window returns the time span each generation covers.
func (w *Windowed) Window() time.Duration { return time.Duration(w.window) }

// MaxTTL returns the longest time a key can be remembered.
func (w *Windowed) MaxTTL() time.Duration { return w.maxTTL }

// Generations returns G, the most generations held at once.
func (w *Windowed) Generations() int { return w.g }

// FPRate returns the target false-positive rate across all generations.
func (w *Windowed) FPRate() float64 { return w.fpRate }

// GenerationSizing returns the geometry of each generation's Bloom filter.
func (w *Windowed) GenerationSizing() Sizing { return w.sizing }

// Seed returns the hash seed.
func (w *Windowed) Seed() uint64 { return w.seed }

// Live returns the number of generations held now (some may have expired if
// nothing was added since; Expire drops them).
func (w *Windowed) Live() int { return len(*w.gens.Load()) }

// Items returns the successful Adds (duplicates counted) held in the
// generations not yet dropped, expired or not (see Expire); adds of an
// already expired key are not counted. It reads one counter per generation,
// not the tables.
func (w *Windowed) Items() uint64 {
	var n uint64
	for _, g := range *w.gens.Load() {
		n += g.bloom.Items()
	}
	return n
}

// Bytes returns the memory held by the generations' tables, including
// generations that expired but were not dropped yet (see Expire). It reads no
// table.
func (w *Windowed) Bytes() uint64 {
	return uint64(len(*w.gens.Load())) * w.sizing.Bytes()
}

// Hash returns the hash of key under this filter's seed, for AddHash and
// MayContainHash.
func (w *Windowed) Hash(key []byte) uint64 { return Hash(key, w.seed) }

// Add inserts key, to be reported present at least until expiresAt
// (inclusive), and forgotten at most one window after it (see Windowed). It
// returns nil when the key is remembered until expiresAt, and also, without
// remembering anything, for an expiry already in the past. An expiry more
// than MaxTTL ahead returns an error wrapping ErrInvalidParams and adds
// nothing, rather than forgetting the key early; so does a clock (Now)
// outside the years 1723–2217. A zero expiresAt means now + MaxTTL.
func (w *Windowed) Add(key []byte, expiresAt time.Time) error {
	return w.AddHash(Hash(key, w.seed), expiresAt)
}

// AddString is Add for a string key.
func (w *Windowed) AddString(key string, expiresAt time.Time) error {
	return w.AddHash(HashString(key, w.seed), expiresAt)
}

// MayContain reports whether key may be in the filter: false means it was
// not added with an expiry still ahead (at or after now). It checks every
// generation whose window has not ended and never locks.
func (w *Windowed) MayContain(key []byte) bool { return w.MayContainHash(Hash(key, w.seed)) }

// MayContainString is MayContain for a string key.
func (w *Windowed) MayContainString(key string) bool {
	return w.MayContainHash(HashString(key, w.seed))
}

// MayContainHash is MayContain for a key's hash (see Hash). Generations whose
// window ended before now are skipped even if not dropped yet (see Expire):
// every key in them has expired.
func (w *Windowed) MayContainHash(h uint64) bool {
	nowNs, err := unixNanos(w.now())
	if err != nil {
		nowNs = math.MinInt64 // a clock out of range: skip nothing
	}
	for _, g := range *w.gens.Load() {
		if g.end >= nowNs && g.bloom.MayContainHash(h) {
			return true
		}
	}
	return false
}

// AddHash is Add for a key's hash (see Hash).
func (w *Windowed) AddHash(h uint64, expiresAt time.Time) error {
	now := w.now()
	nowNs, err := unixNanos(now)
	if err != nil {
		return err
	}
	ttl := w.maxTTL
	if !expiresAt.IsZero() {
		ttl = expiresAt.Sub(now)
		if ttl < 0 {
			return nil
		}
		if ttl > w.maxTTL {
			return fmt.Errorf("%w: expiry %v is %v ahead, beyond MaxTTL %v", ErrInvalidParams, expiresAt, ttl, w.maxTTL)
		}
	}
	end := windowEnd(nowNs+int64(ttl), w.window)
	gens := *w.gens.Load()
	if len(gens) == 0 || gens[0].end >= nowNs { // nothing to drop
		for _, g := range gens {
			if g.end == end {
				g.bloom.addHash(h)
				return nil
			}
		}
	}
	g, err := w.generationFor(end, nowNs)
	if err != nil {
		return err
	}
	g.bloom.addHash(h)
	return nil
}

// ReplayHash is AddHash for an add recorded under an earlier reading of the
// clock, such as one replayed from a log after a restart. An expiry already
// past adds nothing, as in AddHash, so an expired key is not brought back. An
// expiry more than MaxTTL ahead, which means the clock stepped back since the
// add was recorded, is not refused: the key joins a live generation ending at
// or after its expiry, or a new one while fewer than G are live; only when
// neither is possible does ReplayHash return an error wrapping ErrFull, having
// added nothing.
func (w *Windowed) ReplayHash(h uint64, expiresAt time.Time) error {
	now := w.now()
	nowNs, err := unixNanos(now)
	if err != nil {
		return err
	}
	if expiresAt.Before(now) {
		return nil
	}
	eNs, err := unixNanos(expiresAt)
	if err != nil {
		return err
	}
	g, err := w.generationFor(windowEnd(eNs, w.window), nowNs)
	if err != nil {
		return err
	}
	g.bloom.addHash(h)
	return nil
}

// GenerationEnds returns the end of each generation held, oldest first: the
// times at which they are dropped. It includes generations that ended but
// were not dropped yet (see Expire).
func (w *Windowed) GenerationEnds() []time.Time {
	gens := *w.gens.Load()
	out := make([]time.Time, len(gens))
	for i, g := range gens {
		out[i] = time.Unix(0, g.end)
	}
	return out
}

// unixNanos returns t in Unix nanoseconds, or an error if t is too far from
// the epoch for expiries to be computed without overflow.
func unixNanos(t time.Time) (int64, error) {
	if s := t.Unix(); s <= -windowedMaxUnix || s >= windowedMaxUnix {
		return 0, fmt.Errorf("%w: clock reads %v, outside the years 1723–2217", ErrInvalidParams, t)
	}
	return t.UnixNano(), nil
}

// windowEnd returns the end of the window holding expiry e: the smallest
// multiple of w that is ≥ e.
func windowEnd(e, w int64) int64 {
	q := e / w // truncated toward zero, which is the ceiling for e < 0
	if e > 0 && e%w != 0 {
		q++
	}
	return q * w
}

// generationFor returns the generation for keys expiring at end, dropping
// expired generations and creating it if needed.
func (w *Windowed) generationFor(end, nowNs int64) (*generation, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old := *w.gens.Load()
	live := dropExpired(old, nowNs)
	i, found := slices.BinarySearchFunc(live, end, func(g *generation, end int64) int {
		switch {
		case g.end < end:
			return -1
		case g.end > end:
			return 1
		}
		return 0
	})
	changed := len(live) != len(old)
	var g *generation
	switch {
	case found:
		g = live[i]
	case len(live) < w.g:
		g = &generation{end: end, bloom: newBloom(w.sizing, w.seed)}
		live = slices.Insert(slices.Clone(live), i, g)
		changed = true
	case i < len(live):
		// Only after the clock stepped back: the live generations
		// reach past now + MaxTTL. The next one after end keeps the
		// key long enough.
		g = live[i]
	default:
		return nil, fmt.Errorf("%w: %d generations live, none ends after %v", ErrFull, len(live), time.Unix(0, end))
	}
	if changed {
		w.gens.Store(&live)
	}
	return g, nil
}

// dropExpired returns gens without the generations that ended before now. It
// shares gens' backing array: published lists are never modified.
func dropExpired(gens []*generation, nowNs int64) []*generation {
	i := 0
	for i < len(gens) && gens[i].end < nowNs {
		i++
	}
	return gens[i:]
}

// Expire drops the generations whose keys have all expired, returning how
// many it dropped. Add does this as needed; call Expire to release memory
// when keys stop arriving.
func (w *Windowed) Expire() (int, error) {
	nowNs, err := unixNanos(w.now())
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	old := *w.gens.Load()
	live := dropExpired(old, nowNs)
	if len(live) != len(old) {
		w.gens.Store(&live)
	}
	return len(old) - len(live), nil
}

// Stats sums over the generations held: Capacity, Items, Bytes, Bits and
// EstimatedDistinct add up, FillRatio is over all their bits, and
// EstimatedFPRate is the compound 1 − Π(1 − p_i) a lookup sees. Generations
// that expired but were not dropped yet (see Expire) are included, although
// lookups skip them, so EstimatedFPRate can overstate what a lookup sees,
// never understate it. Like Bloom.Stats, it reads every table: O(size).
func (w *Windowed) Stats() Stats {
	s := Stats{Kind: KindWindowed, TargetFPRate: w.fpRate, K: w.sizing.K}
	var set, logMiss float64
	for _, g := range *w.gens.Load() {
		gs := g.bloom.Stats()
		s.Capacity += gs.Capacity
		s.Items += gs.Items
		s.EstimatedDistinct += gs.EstimatedDistinct
		s.Bytes += gs.Bytes
		s.Bits += gs.Bits
		set += gs.FillRatio * float64(gs.Bits)
		logMiss += math.Log1p(-gs.EstimatedFPRate)
	}
	if s.Bits > 0 {
		s.FillRatio = set / float64(s.Bits)
	}
	s.EstimatedFPRate = -math.Expm1(logMiss)
	return s
}

// Windowed parameter block: MaxTTL i64 (ns), window i64 (ns), generations
// u32, reserved u32, capacity per window u64, fp rate f64, generations held
// u32, reserved u32, then each held generation's end (Unix ns, i64), oldest
// first. The payload is each held generation's Bloom frame (header, params,
// table and checksum, as Bloom.WriteTo writes it), in the same order.
const windowedParamsLen = 48

// bloomFrameLen is the length of the frame Bloom.WriteTo writes for s.
func bloomFrameLen(s Sizing) uint64 { return bloomFrameOverhead + s.Bytes() }

// WriteTo writes w in the binary format (see format.go). It does not lock;
// keys acknowledged before WriteTo was called are in the output, keys added
// concurrently may or may not be.
func (w *Windowed) WriteTo(wr io.Writer) (int64, error) {
	gens := *w.gens.Load()
	fw := newFrameWriter(wr)
	fw.header(KindWindowed, w.seed, uint32(windowedParamsLen+8*len(gens)))
	fw.u64(uint64(w.maxTTL))
	fw.u64(uint64(w.window))
	fw.u32(uint32(w.g))
	fw.u32(0)
	fw.u64(w.capacity)
	fw.u64(math.Float64bits(w.fpRate))
	fw.u32(uint32(len(gens)))
	fw.u32(0)
	for _, g := range gens {
		fw.u64(uint64(g.end))
	}
	fw.u64(uint64(len(gens)) * bloomFrameLen(w.sizing))
	for _, g := range gens {
		if _, err := g.bloom.WriteTo(fw); err != nil {
			break // the error sticks in fw
		}
	}
	return fw.finish()
}

// DecodeWindowed reads a Windowed written by WriteTo. now is the clock of the
// decoded filter (nil: time.Now). Input of another kind returns
// ErrKindMismatch; truncated, damaged or inconsistent input returns
// ErrCorrupt. Decode uses time.Now.
func DecodeWindowed(r io.Reader, cfg DecodeConfig, now func() time.Time) (*Windowed, error) {
	fr, err := openFrame(r, cfg, KindWindowed)
	if err != nil {
		return nil, err
	}
	return decodeWindowedBody(fr, now)
}

func decodeWindowedBody(fr *frameReader, now func() time.Time) (*Windowed, error) {
	if fr.paramsLen < windowedParamsLen || (fr.paramsLen-windowedParamsLen)%8 != 0 {
		return nil, fmt.Errorf("%w: windowed parameter block of %d bytes", ErrCorrupt, fr.paramsLen)
	}
	maxTTL, window := int64(fr.u64()), int64(fr.u64())
	g, reserved1 := fr.u32(), fr.u32()
	capacity, fpRate := fr.u64(), math.Float64frombits(fr.u64())
	n, reserved2 := fr.u32(), fr.u32()
	if fr.err != nil {
		return nil, fr.err
	}
	if uint64(fr.paramsLen) != windowedParamsLen+8*uint64(n) {
		return nil, fmt.Errorf("%w: %d generations in %d parameter bytes", ErrCorrupt, n, fr.paramsLen)
	}
	if reserved1 != 0 || reserved2 != 0 {
		return nil, fmt.Errorf("%w: reserved field set", ErrCorrupt)
	}
	if now == nil {
		now = time.Now
	}
	w, err := newWindowed(WindowedConfig{
		MaxTTL: time.Duration(maxTTL), Generations: int(g), Capacity: capacity,
		FPRate: fpRate, Seed: fr.seed, Now: now,
	})
	switch {
	case g == 0 || fpRate == 0 || g > windowedMaxGens:
		return nil, fmt.Errorf("%w: %d generations, false-positive rate %v", ErrCorrupt, g, fpRate)
	case err != nil:
		return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
	case window != w.window:
		return nil, fmt.Errorf("%w: window %d ns, MaxTTL %v and %d generations give %d", ErrCorrupt, window, w.maxTTL, g, w.window)
	case n > g:
		return nil, fmt.Errorf("%w: %d generations held, at most %d live", ErrCorrupt, n, g)
	}
	gens := make([]*generation, n)
	for i := range gens {
		end := int64(fr.u64())
		switch {
		case fr.err != nil:
			return nil, fr.err
		case windowEnd(end, w.window) != end:
			return nil, fmt.Errorf("%w: generation end %d is not on a window boundary", ErrCorrupt, end)
		case i > 0 && end <= gens[i-1].end:
			return nil, fmt.Errorf("%w: generation ends out of order", ErrCorrupt)
		}
		gens[i] = &generation{end: end}
	}
	payload := fr.u64()
	if fr.err != nil {
		return nil, fr.err
	}
	if n == 0 {
		if payload != 0 {
			return nil, fmt.Errorf("%w: payload of %d bytes without generations", ErrCorrupt, payload)
		}
		if w.sizing, err = SizeBloom(w.capacity, windowedGenRate(w.fpRate, w.g)); err != nil {
			return nil, fmt.Errorf("%w: %w", ErrCorrupt, err)
		}
	}
	if n > 0 && payload%uint64(n) != 0 {
		return nil, fmt.Errorf("%w: payload of %d bytes for %d generations", ErrCorrupt, payload, n)
	}
	if payload > fr.maxBytes {
		return nil, fmt.Errorf("%w: payload of %d bytes exceeds the limit of %d", ErrTooLarge, payload, fr.maxBytes)
	}
	// Adds create generations as keys arrive, up to G of them: refuse a
	// filter that could grow past the limit, however few it holds now.
	frameLen := bloomFrameLen(w.sizing)
	if n > 0 {
		frameLen = payload / uint64(n)
	}
	if frameLen > fr.maxBytes/uint64(g) {
		return nil, fmt.Errorf("%w: %d generations of %d bytes exceed the limit of %d", ErrTooLarge, g, frameLen, fr.maxBytes)
	}
	// Each generation is a Bloom frame of the same geometry. It is taken
	// from the first one rather than recomputed (SizeBloom takes
	// milliseconds), after checking that it is sized for this filter's
	// capacity and per-generation rate and meets that rate.
	genRate := windowedGenRate(w.fpRate, w.g)
	for i, gen := range gens {
		sec := fr.nested(payload / uint64(n))
		inner, err := openFrame(sec, DecodeConfig{MaxBytes: fr.maxBytes}, KindBloom)
		if err != nil {
			return nil, fmt.Errorf("%w: generation %d: %w", ErrCorrupt, i, err)
		}
		b, err := decodeBloomBody(inner)
		if err != nil {
			return nil, fmt.Errorf("%w: generation %d: %w", ErrCorrupt, i, err)
		}
		s := b.Sizing()
		if i == 0 {
			if s.Capacity != w.capacity || s.FPRate != genRate || s.FPRateAt(s.Capacity) > genRate {
				return nil, fmt.Errorf("%w: generation sized %+v, want capacity %d at rate %g", ErrCorrupt, s, w.capacity, genRate)
			}
			w.sizing = s
		}
		if b.seed != w.seed || s != w.sizing || sec.left != 0 {
			return nil, fmt.Errorf("%w: generation %d: seed %d, geometry %+v, %d bytes left over; want seed %d, geometry %+v",
				ErrCorrupt, i, b.seed, s, sec.left, w.seed, w.sizing)
		}
		gen.bloom = b
	}
	if err := fr.finish(); err != nil {
		return nil, err
	}
	w.gens.Store(&gens)
	return w, nil
}
