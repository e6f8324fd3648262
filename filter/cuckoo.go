package filter

import (
	"fmt"
	"io"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
)

// Cuckoo filter (Fan, Andersen, Kaminsky, Mitzenmacher, "Cuckoo Filter:
// Practically Better Than Bloom", CoNEXT 2014).
//
// The table has m buckets of b slots; a slot holds an f-bit fingerprint, 0
// meaning empty. A key's 64-bit hash h (Hash with the filter's seed) gives
//
//	i1 = (h>>32)·m >> 32                     bucket (Lemire's range reduction)
//	fp = 1 + (h mod 2^32)·(2^f − 1) >> 32    fingerprint in [1, 2^f − 1]
//	i2 = alt(i1, fp) = (H(fp) − i1) mod m    alternate bucket
//
// where H(fp) = (fp·0x9E3779B97F4A7C15 >> 32)·m >> 32. Partial-key cuckoo
// hashing needs alt to be an involution, so that a fingerprint can be moved
// between its two buckets without the key: (H − (H − i)) mod m = i for any m.
// The paper's i1 XOR hash(fp) has that property only when m is a power of two;
// subtraction mod m has it for every m, so the table is sized to the keys
// instead of rounded up to a power of two (which wastes up to half of it).
//
// False-positive rate. A lookup compares fp against the 2b slots of its two
// buckets; each occupied slot matches an unrelated fingerprint with
// probability 1/(2^f − 1), so at load α
//
//	p = 1 − (1 − 1/(2^f − 1))^(2bα) ≤ 2b/(2^f − 1)
//
// and the filter uses the smallest f with 2b/(2^f − 1) ≤ p, i.e.
// f = ⌈log2(2b/p + 1)⌉, which holds at any load. For the default p = 0.1 %
// and b = 4 that is f = 13.
//
// Bucket size: larger buckets reach a higher load before inserts fail
// (b = 2: ~84 %, b = 4: ~95 %, b = 8: ~98 % with 500 kicks) but need a bit
// more per fingerprint for each doubling. With BucketSize zero the filter
// takes the b in {2, 4} with fewer bits per key, f/load, preferring 4 on a
// tie: 4 below p ≈ 3 %, mostly 2 above (b = 8 would pay off only past 32-bit
// fingerprints, but can be chosen explicitly).
//
// Sizing: m = ⌈n/(b·load) + c·√(n/b) + 2⌉ buckets, where the margin (c = 4 for
// b = 2, else 2) covers the variance of small tables, so a filter accepts its
// capacity of distinct keys without ErrFull. For large n the load at capacity
// approaches the target (0.946 for b = 4 at a million keys).
//
// Layout: slots are packed f bits apiece into 64-bit words, slot j of the
// table (bucket j/b) at bit j·f. Words are read and written atomically.

const (
	cuckooMaxBuckets   = 1 << 32 // bucket indexes are 32-bit
	cuckooMaxFPBits    = 32
	cuckooMinFPBits    = 2
	cuckooMaxKicks     = 1 << 16
	cuckooMaxFilters   = 64
	cuckooDefaultKicks = 500
	cuckooAltMul       = 0x9E3779B97F4A7C15
)

// cuckooLoad is the load factor each bucket size is sized for: a little below
// what random-walk insertion with 500 kicks reaches.
func cuckooLoad(b int) float64 {
	switch b {
	case 2:
		return 0.84
	case 4:
		return 0.95
	}
	return 0.98
}

// cuckooMargin is the extra buckets, in units of √(n/b), a table gets for the
// variance of the load at which inserts start to fail, which is large for
// small tables and for b = 2. Measured: with these margins no table from 1 to
// 100,000 keys failed to take its capacity in thousands of seeds per size
// (with half the margin, b = 2 failed a few times in 8,000).
func cuckooMargin(b int) float64 {
	if b == 2 {
		return 4
	}
	return 2
}

// CuckooConfig configures NewCuckoo.
type CuckooConfig struct {
	// Capacity is the number of distinct keys the filter accepts without
	// ErrFull (each copy of a key added twice takes a slot of its own).
	// Required; must be > 0.
	Capacity uint64
	// FPRate is the target false-positive rate. With MaxFilters > 1 it
	// bounds all sub-filters together. Default: DefaultFPRate (0.1 %).
	FPRate float64
	// BucketSize is the number of fingerprints per bucket: 2, 4 or 8.
	// Default (zero): 2 or 4, whichever needs fewer bits per key at FPRate
	// (4 at rates below about 3 %).
	BucketSize int
	// MaxKicks bounds the relocations one insert may make before it gives
	// up. Default (zero): 500. At most 65536.
	MaxKicks int
	// MaxFilters is the number of sub-filters the filter may grow to. When
	// the newest is full, a new one with twice its capacity is added, so
	// the filter never returns ErrFull until MaxFilters are full. To keep
	// the combined false-positive rate within FPRate, sub-filter i is sized
	// for FPRate/2^(i+1) (one more fingerprint bit each). Default (zero): 1,
	// no growth. At most 64.
	MaxFilters int
	// Seed seeds the key hash. Default: 0.
	Seed uint64
}

// Cuckoo is a cuckoo filter: a membership filter that supports Remove and
// counts copies of a key, at a smaller size than a Bloom filter for rates
// below about 0.3 %. See the comment at the top of cuckoo.go for the hashing
// and the sizing formulas.
//
// Inserting relocates fingerprints along a chain of at most MaxKicks moves.
// When no free slot is found, the fingerprint left over at the end of the
// chain is kept in a one-entry victim slot, which lookups check, so the insert
// still succeeds; while the victim slot is occupied an insert that finds both
// of its buckets full returns ErrFull and changes nothing. No fingerprint of
// an acknowledged key is ever dropped. Remove frees a slot and moves the
// victim back into the table when it can.
//
// A key can be added more than once (Count reports the copies), at most 2b
// times per sub-filter (2b + 1 with the victim slot): its copies share the
// same two buckets.
//
// Concurrency: a Cuckoo is safe for concurrent use. Add and Remove take a
// mutex. MayContain does not lock: it reads the table atomically under a
// sequence counter that writers make odd while they move a fingerprint (a
// relocation chain, or the victim's return to the table after a Remove), and
// retries when a move ran meanwhile; after a few retries it waits for the
// writer mutex (at most one chain of MaxKicks moves). Under a constant stream of inserts
// into a nearly full table, readers can therefore wait on writers. Use a Bloom
// when lookups must never wait: its Add and MayContain never block.
type Cuckoo struct {
	mu     sync.Mutex    // serialises Add, Remove and WriteTo
	seq    atomic.Uint64 // odd while a writer moves fingerprints (kick chain, victim re-home)
	tables atomic.Pointer[[]*cuckooTable]

	capacity   uint64 // Capacity of the first sub-filter
	fpRate     float64
	b          int
	maxKicks   int
	maxFilters int
	seed       uint64

	rng          uint64   // writer-only xorshift state for kick choices
	path         []uint64 // writer-only: slots touched by a kick chain
	removeMisses atomic.Uint64
}

var _ Filter = (*Cuckoo)(nil)

// cuckooTable is one sub-filter.
type cuckooTable struct {
	words    []uint64 // packed f-bit slots
	buckets  uint64
	b        uint64
	f        uint64
	mask     uint64 // 2^f − 1
	capacity uint64
	// When a bucket fits in 64 bits (b·f ≤ 64), has compares all its slots
	// at once: lanes has a 1 at the bottom of each f-bit lane, highs at the
	// top, bucketMask covers the b·f bits.
	swar         bool
	lanes, highs uint64
	bucketBits   uint64
	bucketMask   uint64
	// victim holds fp<<32 | bucket of a fingerprint that found no slot; 0
	// when empty (fingerprints are never 0).
	victim atomic.Uint64
	items  atomic.Uint64 // fingerprints stored, victim included
}

// cuckooGeom is a sub-filter's geometry.
type cuckooGeom struct {
	buckets, b, f uint64
}

func (g cuckooGeom) words() uint64 { return (g.buckets*g.b*g.f + 63) / 64 }

// cuckooFPBits returns the fingerprint bits for bucket size b at rate p:
// the smallest f with 2b/(2^f − 1) ≤ p, or 0 if more than 32 bits are needed.
func cuckooFPBits(b int, p float64) uint64 {
	f := uint64(max(cuckooMinFPBits, math.Ceil(math.Log2(2*float64(b)/p+1))))
	for f > cuckooMinFPBits && 2*float64(b)/float64(uint64(1)<<(f-1)-1) <= p {
		f--
	}
	for f <= cuckooMaxFPBits && 2*float64(b)/float64(uint64(1)<<f-1) > p {
		f++
	}
	if f > cuckooMaxFPBits {
		return 0
	}
	return f
}

// cuckooBucketSize picks the bucket size with the fewest bits per key at p.
func cuckooBucketSize(p float64) int {
	best, bestBits := 0, math.Inf(1)
	for _, b := range []int{4, 2} {
		f := cuckooFPBits(b, p)
		if f == 0 {
			continue
		}
		if bits := float64(f) / cuckooLoad(b); bits < bestBits-1e-9 {
			best, bestBits = b, bits
		}
	}
	return best
}

// sizeCuckoo returns the geometry for n keys at rate p with buckets of b.
func sizeCuckoo(n uint64, p float64, b int) (cuckooGeom, error) {
	f := cuckooFPBits(b, p)
	if f == 0 {
		return cuckooGeom{}, fmt.Errorf("%w: false-positive rate %g needs fingerprints over %d bits", ErrInvalidParams, p, cuckooMaxFPBits)
	}
	perBucket := float64(n) / float64(b)
	m := math.Ceil(perBucket/cuckooLoad(b) + cuckooMargin(b)*math.Sqrt(perBucket) + 2)
	if m > cuckooMaxBuckets || m*float64(b)*float64(f)/8 > float64(math.MaxInt/2) {
		return cuckooGeom{}, fmt.Errorf("%w: %d keys need %.0f buckets, more than %d", ErrTooLarge, n, m, uint64(cuckooMaxBuckets))
	}
	return cuckooGeom{buckets: uint64(m), b: uint64(b), f: f}, nil
}

// cuckooTableRate is the false-positive rate sub-filter i is sized for.
func cuckooTableRate(p float64, i, maxFilters int) float64 {
	if maxFilters == 1 {
		return p
	}
	return math.Ldexp(p, -(i + 1))
}

// NewCuckoo returns an empty cuckoo filter for cfg.
func NewCuckoo(cfg CuckooConfig) (*Cuckoo, error) {
	if cfg.FPRate == 0 {
		cfg.FPRate = DefaultFPRate
	}
	if cfg.MaxKicks == 0 {
		cfg.MaxKicks = cuckooDefaultKicks
	}
	if cfg.MaxFilters == 0 {
		cfg.MaxFilters = 1
	}
	switch {
	case cfg.Capacity == 0:
		return nil, fmt.Errorf("%w: capacity must be > 0", ErrInvalidParams)
	case math.IsNaN(cfg.FPRate) || cfg.FPRate <= 0 || cfg.FPRate >= 1:
		return nil, fmt.Errorf("%w: false-positive rate %v outside (0, 1)", ErrInvalidParams, cfg.FPRate)
	case cfg.BucketSize != 0 && cfg.BucketSize != 2 && cfg.BucketSize != 4 && cfg.BucketSize != 8:
		return nil, fmt.Errorf("%w: bucket size %d (want 2, 4 or 8)", ErrInvalidParams, cfg.BucketSize)
	case cfg.MaxKicks < 0 || cfg.MaxKicks > cuckooMaxKicks:
		return nil, fmt.Errorf("%w: MaxKicks %d outside [1, %d]", ErrInvalidParams, cfg.MaxKicks, cuckooMaxKicks)
	case cfg.MaxFilters < 0 || cfg.MaxFilters > cuckooMaxFilters:
		return nil, fmt.Errorf("%w: MaxFilters %d outside [1, %d]", ErrInvalidParams, cfg.MaxFilters, cuckooMaxFilters)
	}
	if cfg.BucketSize == 0 {
		cfg.BucketSize = cuckooBucketSize(cuckooTableRate(cfg.FPRate, 0, cfg.MaxFilters))
		if cfg.BucketSize == 0 {
			return nil, fmt.Errorf("%w: false-positive rate %g needs fingerprints over %d bits", ErrInvalidParams, cfg.FPRate, cuckooMaxFPBits)
		}
	}
	// Every sub-filter the filter may grow to must have fingerprints of at
	// most 32 bits.
	if last := cuckooTableRate(cfg.FPRate, cfg.MaxFilters-1, cfg.MaxFilters); cuckooFPBits(cfg.BucketSize, last) == 0 {
		return nil, fmt.Errorf("%w: %d sub-filters at rate %g need fingerprints over %d bits", ErrInvalidParams, cfg.MaxFilters, cfg.FPRate, cuckooMaxFPBits)
	}
	c := &Cuckoo{
		capacity:   cfg.Capacity,
		fpRate:     cfg.FPRate,
		b:          cfg.BucketSize,
		maxKicks:   cfg.MaxKicks,
		maxFilters: cfg.MaxFilters,
		seed:       cfg.Seed,
	}
	t, err := c.newTable(0)
	if err != nil {
		return nil, err
	}
	c.setup([]*cuckooTable{t})
	return c, nil
}

func (c *Cuckoo) setup(ts []*cuckooTable) {
	c.tables.Store(&ts)
	c.path = make([]uint64, c.maxKicks)
	c.rng = c.seed ^ 0x853c49e6748fea9b | 1
}

// geom returns the geometry of sub-filter i.
func (c *Cuckoo) geom(i int) (capacity uint64, g cuckooGeom, err error) {
	if c.capacity > math.MaxUint64>>i {
		return 0, cuckooGeom{}, fmt.Errorf("%w: capacity overflows", ErrTooLarge)
	}
	capacity = c.capacity << i
	g, err = sizeCuckoo(capacity, cuckooTableRate(c.fpRate, i, c.maxFilters), c.b)
	return capacity, g, err
}

func (c *Cuckoo) newTable(i int) (*cuckooTable, error) {
	capacity, g, err := c.geom(i)
	if err != nil {
		return nil, err
	}
	return newCuckooTable(g, capacity, make([]uint64, g.words())), nil
}

func newCuckooTable(g cuckooGeom, capacity uint64, words []uint64) *cuckooTable {
	t := &cuckooTable{words: words, buckets: g.buckets, b: g.b, f: g.f, mask: 1<<g.f - 1, capacity: capacity}
	t.bucketBits = g.b * g.f
	if t.bucketBits <= 64 {
		t.swar = true
		for k := range g.b {
			t.lanes |= 1 << (k * g.f)
		}
		t.highs = t.lanes << (g.f - 1)
		t.bucketMask = math.MaxUint64 >> (64 - t.bucketBits)
	}
	return t
}

// Seed returns the hash seed.
func (c *Cuckoo) Seed() uint64 { return c.seed }

// Hash returns the hash of key under this filter's seed, for AddHash,
// RemoveHash, MayContainHash and CountHash.
func (c *Cuckoo) Hash(key []byte) uint64 { return Hash(key, c.seed) }

// Items returns the fingerprints held: successful Adds (duplicates counted)
// minus successful Removes. It reads one counter per sub-filter, not the
// tables.
func (c *Cuckoo) Items() uint64 {
	var n uint64
	for _, t := range *c.tables.Load() {
		n += t.items.Load()
	}
	return n
}

// Bytes returns the memory held by the sub-filters' tables.
func (c *Cuckoo) Bytes() uint64 {
	var n uint64
	for _, t := range *c.tables.Load() {
		n += uint64(len(t.words)) * 8
	}
	return n
}

// BucketSize returns the number of slots per bucket.
func (c *Cuckoo) BucketSize() int { return c.b }

// FingerprintBits returns the fingerprint size of each sub-filter, oldest
// first.
func (c *Cuckoo) FingerprintBits() []int {
	ts := *c.tables.Load()
	out := make([]int, len(ts))
	for i, t := range ts {
		out[i] = int(t.f)
	}
	return out
}

// Add inserts key. After it returns nil, MayContain(key) is true until a
// Remove of the key. It returns an error wrapping ErrFull when the key cannot
// be placed and the filter may not grow (MaxFilters): the key was not added
// and the filter is unchanged, still holding every key acknowledged before.
func (c *Cuckoo) Add(key []byte) error { return c.AddHash(Hash(key, c.seed)) }

// AddString is Add for a string key.
func (c *Cuckoo) AddString(key string) error { return c.AddHash(HashString(key, c.seed)) }

// MayContain reports whether key may be in the filter.
func (c *Cuckoo) MayContain(key []byte) bool { return c.MayContainHash(Hash(key, c.seed)) }

// MayContainString is MayContain for a string key.
func (c *Cuckoo) MayContainString(key string) bool {
	return c.MayContainHash(HashString(key, c.seed))
}

// Remove deletes one copy of key added earlier.
//
// Removing a key that was never added is the caller's error: if another key
// shares its fingerprint and a bucket, that key's fingerprint is deleted and
// it becomes a false negative. Remove cannot tell the two apart. It returns
// ErrNotFound when no matching fingerprint exists (nothing is changed, and
// RemoveMisses counts it); a nil return does not prove the key was added.
//
// With several sub-filters (MaxFilters > 1), a key may match in more than
// one: its own entry in one, an unrelated key's entry with the same
// fingerprint in another (probability about FPRate per Remove), or copies of
// the key added in different sub-filters. Remove cannot tell which entry is
// whose, so it removes nothing and returns ErrAmbiguous: the key stays
// reported present (a false positive) rather than risking a false negative
// for the other key.
func (c *Cuckoo) Remove(key []byte) error { return c.RemoveHash(Hash(key, c.seed)) }

// RemoveString is Remove for a string key.
func (c *Cuckoo) RemoveString(key string) error { return c.RemoveHash(HashString(key, c.seed)) }

// Count returns how many copies of key the filter holds: the fingerprints in
// the key's buckets (and victim slot) that match it. Keys sharing the
// fingerprint and a bucket are counted too, so it can overstate, never
// understate, the copies added and not removed.
func (c *Cuckoo) Count(key []byte) int { return c.CountHash(Hash(key, c.seed)) }

// CountString is Count for a string key.
func (c *Cuckoo) CountString(key string) int { return c.CountHash(HashString(key, c.seed)) }

// locate returns the key's bucket and fingerprint in t.
func (t *cuckooTable) locate(h uint64) (i1, fp uint64) {
	return (h >> 32) * t.buckets >> 32, 1 + (h&0xffffffff)*t.mask>>32
}

// alt returns fp's other bucket.
func (t *cuckooTable) alt(i, fp uint64) uint64 {
	x := (fp * cuckooAltMul >> 32) * t.buckets >> 32
	if x >= i {
		return x - i
	}
	return x + t.buckets - i
}

// slot returns the fingerprint in slot j.
func (t *cuckooTable) slot(j uint64) uint64 {
	o := j * t.f
	w, s := o>>6, o&63
	v := atomic.LoadUint64(&t.words[w]) >> s
	if s+t.f > 64 {
		v |= atomic.LoadUint64(&t.words[w+1]) << (64 - s)
	}
	return v & t.mask
}

// setSlot stores fp in slot j. Writers only (under Cuckoo.mu).
func (t *cuckooTable) setSlot(j, fp uint64) {
	o := j * t.f
	w, s := o>>6, o&63
	x := atomic.LoadUint64(&t.words[w])
	atomic.StoreUint64(&t.words[w], x&^(t.mask<<s)|fp<<s)
	if s+t.f > 64 {
		r := 64 - s
		y := atomic.LoadUint64(&t.words[w+1])
		atomic.StoreUint64(&t.words[w+1], y&^(t.mask>>r)|fp>>r)
	}
}

// bucket returns the b·f bits of bucket i; only when t.swar.
func (t *cuckooTable) bucket(i uint64) uint64 {
	o := i * t.bucketBits
	w, s := o>>6, o&63
	v := atomic.LoadUint64(&t.words[w]) >> s
	if s+t.bucketBits > 64 {
		v |= atomic.LoadUint64(&t.words[w+1]) << (64 - s)
	}
	return v & t.bucketMask
}

// has reports whether bucket i holds fp. With buckets of at most 64 bits it
// compares every slot at once: x = bucket XOR fp in every lane has a zero
// lane exactly where fp is, and (x − lanes) &^ x & highs is non-zero exactly
// when x has a zero lane (the lowest zero lane borrows; lanes below it do
// not).
func (t *cuckooTable) has(i, fp uint64) bool {
	if t.swar {
		x := t.bucket(i) ^ fp*t.lanes
		return (x-t.lanes)&^x&t.highs != 0
	}
	return t.count(i, fp, true) > 0
}

// count returns the slots of bucket i holding fp; with first, it stops at
// the first. It loads the bucket's words once (at most five: b·f ≤ 256 bits
// at any bit offset) and takes the slots from the copy.
func (t *cuckooTable) count(i, fp uint64, first bool) int {
	o := i * t.b * t.f
	w0, s := o>>6, o&63
	w1 := (o + t.b*t.f - 1) >> 6
	var ws [8]uint64 // words past w1 stay zero: the last slot's high part
	for w := w0; w <= w1; w++ {
		ws[(w-w0)&7] = atomic.LoadUint64(&t.words[w])
	}
	n := 0
	for q := s; q < s+t.b*t.f; q += t.f {
		k, r := q>>6, q&63
		v := ws[k&7] >> r
		if r != 0 {
			v |= ws[(k+1)&7] << (64 - r)
		}
		if v&t.mask == fp {
			if n++; first {
				return n
			}
		}
	}
	return n
}

// put stores fp in a free slot of bucket i, reporting whether there was one.
func (t *cuckooTable) put(i, fp uint64) bool {
	for j := i * t.b; j < (i+1)*t.b; j++ {
		if t.slot(j) == 0 {
			t.setSlot(j, fp)
			return true
		}
	}
	return false
}

// del clears one slot of bucket i holding fp, reporting whether there was one.
func (t *cuckooTable) del(i, fp uint64) bool {
	for j := i * t.b; j < (i+1)*t.b; j++ {
		if t.slot(j) == fp {
			t.setSlot(j, 0)
			return true
		}
	}
	return false
}

// victimMatches reports whether the victim slot holds fp for buckets i1/i2.
func (t *cuckooTable) victimMatches(fp, i1, i2 uint64) bool {
	v := t.victim.Load()
	return v != 0 && v>>32 == fp && (v&0xffffffff == i1 || v&0xffffffff == i2)
}

// probe counts the fingerprints matching h over all sub-filters; with first,
// it stops at the first.
func (c *Cuckoo) probe(h uint64, first bool) int {
	n := 0
	for _, t := range *c.tables.Load() {
		i1, fp := t.locate(h)
		i2 := t.alt(i1, fp)
		if first {
			if t.has(i1, fp) || t.has(i2, fp) || t.victimMatches(fp, i1, i2) {
				return 1
			}
			continue
		}
		n += t.count(i1, fp, false)
		if i2 != i1 {
			n += t.count(i2, fp, false)
		}
		if t.victimMatches(fp, i1, i2) {
			n++
		}
	}
	return n
}

// read runs probe without locking, retrying when a relocation chain ran
// concurrently (a fingerprint in flight may have been missed). A match is
// returned at once: a fingerprint seen in the key's bucket is a valid
// answer whatever the writer was doing.
func (c *Cuckoo) read(h uint64, first bool) int {
	for range 4 {
		s := c.seq.Load()
		if s&1 != 0 {
			continue
		}
		n := c.probe(h, first)
		if (first && n > 0) || c.seq.Load() == s {
			return n
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.probe(h, first)
}

// MayContainHash reports whether the key with hash h (see Hash) may be in the
// filter.
func (c *Cuckoo) MayContainHash(h uint64) bool { return c.read(h, true) > 0 }

// CountHash is Count for a key's hash.
func (c *Cuckoo) CountHash(h uint64) int { return c.read(h, false) }

// AddHash is Add for a key's hash (see Hash).
func (c *Cuckoo) AddHash(h uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := *c.tables.Load()
	t := ts[len(ts)-1]
	if c.insert(t, h) {
		return nil
	}
	if len(ts) >= c.maxFilters {
		return ErrFull
	}
	nt, err := c.newTable(len(ts))
	if err != nil {
		return fmt.Errorf("%w: cannot add sub-filter %d: %w", ErrFull, len(ts)+1, err)
	}
	grown := append(ts[:len(ts):len(ts)], nt)
	c.tables.Store(&grown)
	if !c.insert(nt, h) {
		return ErrFull // a key added more than 2b times
	}
	return nil
}

// insert places the key with hash h in t, reporting whether it did. Writers
// only.
func (c *Cuckoo) insert(t *cuckooTable, h uint64) bool {
	i1, fp := t.locate(h)
	i2 := t.alt(i1, fp)
	if t.put(i1, fp) || t.put(i2, fp) {
		t.items.Add(1)
		return true
	}
	if t.victim.Load() != 0 {
		return false
	}
	c.reseed(h)
	i := i1
	if c.rand()&1 == 0 {
		i = i2
	}
	c.seq.Add(1)
	ok := c.kick(t, fp, i, true)
	c.seq.Add(1)
	if !ok {
		return false
	}
	t.items.Add(1)
	return true
}

// kick places fp in bucket i by relocation: it swaps fp with a random
// fingerprint of the bucket and carries that one to its other bucket, up to
// MaxKicks times, until a fingerprint lands in a free slot. If none does, the
// fingerprint left over goes to the victim slot when useVictim and the slot is
// free; otherwise every move is undone and kick reports false, leaving the
// table as it was. The caller makes seq odd around it, so readers retry.
func (c *Cuckoo) kick(t *cuckooTable, fp, i uint64, useVictim bool) bool {
	for n := range c.maxKicks {
		j := i*t.b + (c.rand()>>32)*t.b>>32
		old := t.slot(j)
		t.setSlot(j, fp)
		c.path[n] = j
		fp, i = old, t.alt(i, old)
		if t.put(i, fp) {
			return true
		}
	}
	if useVictim && t.victim.Load() == 0 {
		t.victim.Store(fp<<32 | i)
		return true
	}
	for n := c.maxKicks - 1; n >= 0; n-- {
		j := c.path[n]
		old := t.slot(j)
		t.setSlot(j, fp)
		fp = old
	}
	return false
}

// reseed starts the kick choices of one insert or re-home from x (the key's
// hash, or the victim), not from the history of earlier inserts: the same
// operation on the same table makes the same moves. So a filter decoded from
// its encoding and given the operations that followed the encoding ends in
// the same state as the original, and an add that succeeded on the original
// succeeds on the copy (a log replayed after a snapshot never loses a key).
// Writers only.
func (c *Cuckoo) reseed(x uint64) {
	x ^= c.seed
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	c.rng = x ^ x>>31 | 1
}

// rand is xorshift64*, writer-only.
func (c *Cuckoo) rand() uint64 {
	c.rng ^= c.rng >> 12
	c.rng ^= c.rng << 25
	c.rng ^= c.rng >> 27
	return c.rng * 0x2545F4914F6CDD1D
}

// RemoveHash is Remove for a key's hash (see Hash).
func (c *Cuckoo) RemoveHash(h uint64) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Find the sub-filters with an entry matching the key. Within one
	// sub-filter, entries matching the key are interchangeable: every key
	// they could belong to has the same fingerprint and buckets there, so
	// deleting any one of them is the same. Across sub-filters they are not.
	var hit *cuckooTable
	hits := 0
	for _, t := range *c.tables.Load() {
		i1, fp := t.locate(h)
		i2 := t.alt(i1, fp)
		if t.has(i1, fp) || t.has(i2, fp) || t.victimMatches(fp, i1, i2) {
			hit = t
			hits++
		}
	}
	switch {
	case hits == 0:
		c.removeMisses.Add(1)
		return ErrNotFound
	case hits > 1:
		return ErrAmbiguous
	}
	t := hit
	i1, fp := t.locate(h)
	i2 := t.alt(i1, fp)
	if t.del(i1, fp) || t.del(i2, fp) {
		t.items.Add(^uint64(0))
		c.rehome(t)
		return nil
	}
	t.victim.Store(0)
	t.items.Add(^uint64(0))
	return nil
}

// rehome moves t's victim, if any, into the table when there is room. The
// fingerprint is in the table before the victim slot is cleared, so it is
// never missing from the table as a whole; but a lookup reads the buckets
// before the victim slot, and could read the buckets before the put and the
// victim slot after the clear. So the move, like a kick chain, runs with seq
// odd: a lookup that overlaps it sees seq change and retries. Writers only.
func (c *Cuckoo) rehome(t *cuckooTable) {
	v := t.victim.Load()
	if v == 0 {
		return
	}
	fp, i := v>>32, v&0xffffffff
	c.reseed(v)
	c.seq.Add(1)
	defer c.seq.Add(1)
	if t.put(i, fp) || t.put(t.alt(i, fp), fp) || c.kick(t, fp, i, false) {
		t.victim.Store(0)
	}
}

// Stats reports the filter's size and fill. Items counts the fingerprints
// held (adds minus removes, duplicates included), which is also
// EstimatedDistinct: a cuckoo filter cannot tell duplicates apart. K is 2,
// the buckets a lookup reads. EstimatedFPRate is 1 − Π(1 − 1/(2^f−1))^(2bα)
// over the sub-filters at their current load α. RemoveMisses counts the
// Removes that returned ErrNotFound since the filter was created or decoded
// (the encoding does not keep it). Unlike the Bloom families' Stats it reads
// only counters, one set per sub-filter, not the tables.
func (c *Cuckoo) Stats() Stats {
	s := Stats{Kind: KindCuckoo, TargetFPRate: c.fpRate, K: 2, RemoveMisses: c.removeMisses.Load()}
	var slots, used uint64
	var logMiss float64
	for _, t := range *c.tables.Load() {
		items := t.items.Load()
		inTable := items
		if t.victim.Load() != 0 && inTable > 0 {
			inTable--
		}
		n := t.buckets * t.b
		s.Capacity += t.capacity
		s.Items += items
		s.Bytes += uint64(len(t.words)) * 8
		s.Bits += n * t.f
		slots += n
		used += inTable
		load := float64(inTable) / float64(n)
		logMiss += 2 * float64(t.b) * load * math.Log1p(-1/float64(t.mask))
	}
	s.EstimatedDistinct = float64(s.Items)
	s.FillRatio = float64(used) / float64(slots)
	s.EstimatedFPRate = -math.Expm1(logMiss)
	return s
}

// Cuckoo parameter block: capacity u64, fp rate f64, bucket size u32,
// MaxKicks u32, MaxFilters u32, sub-filter count u32, then per sub-filter:
// capacity u64, buckets u64, fingerprint bits u32, reserved u32, items u64,
// victim u64. The payload is the sub-filters' tables, one after another, as
// 64-bit words.
const (
	cuckooParamsLen      = 32
	cuckooTableParamsLen = 40
)

// WriteTo writes c in the binary format (see format.go). It holds the writer
// lock while writing, so Add and Remove wait (MayContain does not), and the
// output holds every key acknowledged before WriteTo was called.
func (c *Cuckoo) WriteTo(w io.Writer) (int64, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	ts := *c.tables.Load()
	fw := newFrameWriter(w)
	fw.header(KindCuckoo, c.seed, uint32(cuckooParamsLen+cuckooTableParamsLen*len(ts)))
	fw.u64(c.capacity)
	fw.u64(math.Float64bits(c.fpRate))
	fw.u32(uint32(c.b))
	fw.u32(uint32(c.maxKicks))
	fw.u32(uint32(c.maxFilters))
	fw.u32(uint32(len(ts)))
	var payload uint64
	for _, t := range ts {
		fw.u64(t.capacity)
		fw.u64(t.buckets)
		fw.u32(uint32(t.f))
		fw.u32(0)
		fw.u64(t.items.Load())
		fw.u64(t.victim.Load())
		payload += uint64(len(t.words)) * 8
	}
	fw.u64(payload)
	for _, t := range ts {
		fw.words(t.words)
	}
	return fw.finish()
}

// DecodeCuckoo reads a Cuckoo written by WriteTo. Input of another kind
// returns ErrKindMismatch; truncated, damaged or inconsistent input returns
// ErrCorrupt.
func DecodeCuckoo(r io.Reader, cfg DecodeConfig) (*Cuckoo, error) {
	fr, err := openFrame(r, cfg, KindCuckoo)
	if err != nil {
		return nil, err
	}
	return decodeCuckooBody(fr)
}

func decodeCuckooBody(fr *frameReader) (*Cuckoo, error) {
	if fr.paramsLen < cuckooParamsLen+cuckooTableParamsLen || (fr.paramsLen-cuckooParamsLen)%cuckooTableParamsLen != 0 {
		return nil, fmt.Errorf("%w: cuckoo parameter block of %d bytes", ErrCorrupt, fr.paramsLen)
	}
	c := &Cuckoo{seed: fr.seed}
	c.capacity = fr.u64()
	c.fpRate = math.Float64frombits(fr.u64())
	b, kicks, maxFilters, n := fr.u32(), fr.u32(), fr.u32(), fr.u32()
	if fr.err != nil {
		return nil, fr.err
	}
	switch {
	case c.capacity == 0:
		return nil, fmt.Errorf("%w: zero capacity", ErrCorrupt)
	case !(c.fpRate > 0 && c.fpRate < 1):
		return nil, fmt.Errorf("%w: false-positive rate %v", ErrCorrupt, c.fpRate)
	case b != 2 && b != 4 && b != 8:
		return nil, fmt.Errorf("%w: bucket size %d", ErrCorrupt, b)
	case kicks == 0 || kicks > cuckooMaxKicks:
		return nil, fmt.Errorf("%w: MaxKicks %d", ErrCorrupt, kicks)
	case maxFilters == 0 || maxFilters > cuckooMaxFilters:
		return nil, fmt.Errorf("%w: MaxFilters %d", ErrCorrupt, maxFilters)
	case n == 0 || n > maxFilters || uint64(fr.paramsLen) != cuckooParamsLen+cuckooTableParamsLen*uint64(n):
		return nil, fmt.Errorf("%w: %d sub-filters (max %d) in %d parameter bytes", ErrCorrupt, n, maxFilters, fr.paramsLen)
	}
	c.b, c.maxKicks, c.maxFilters = int(b), int(kicks), int(maxFilters)
	ts := make([]*cuckooTable, n)
	victims := make([]uint64, n)
	var total uint64
	for i := range ts {
		capacity, buckets, f, reserved, items, victim := fr.u64(), fr.u64(), fr.u32(), fr.u32(), fr.u64(), fr.u64()
		if fr.err != nil {
			return nil, fr.err
		}
		wantCap, g, err := c.geom(i)
		if err != nil {
			return nil, fmt.Errorf("%w: sub-filter %d: %w", ErrCorrupt, i, err)
		}
		if capacity != wantCap || buckets != g.buckets || uint64(f) != g.f || reserved != 0 {
			return nil, fmt.Errorf("%w: sub-filter %d geometry (capacity %d, %d buckets, %d-bit fingerprints) does not match its parameters", ErrCorrupt, i, capacity, buckets, f)
		}
		t := newCuckooTable(g, capacity, nil)
		if victim != 0 && (victim>>32 == 0 || victim>>32 > t.mask || victim&0xffffffff >= buckets) {
			return nil, fmt.Errorf("%w: sub-filter %d victim %#x", ErrCorrupt, i, victim)
		}
		if items > buckets*g.b+1 {
			return nil, fmt.Errorf("%w: sub-filter %d holds %d items in %d slots", ErrCorrupt, i, items, buckets*g.b)
		}
		t.items.Store(items)
		victims[i] = victim
		ts[i] = t
		total += g.words()
	}
	payload := fr.u64()
	if fr.err != nil {
		return nil, fr.err
	}
	if payload != total*8 {
		return nil, fmt.Errorf("%w: payload %d bytes, sub-filters need %d", ErrCorrupt, payload, total*8)
	}
	if payload > fr.maxBytes {
		return nil, fmt.Errorf("%w: payload of %d bytes exceeds the limit of %d", ErrTooLarge, payload, fr.maxBytes)
	}
	for i, t := range ts {
		words, err := fr.words(cuckooGeom{t.buckets, t.b, t.f}.words())
		if err != nil {
			return nil, err
		}
		t.words = words
		if err := t.check(victims[i]); err != nil {
			return nil, fmt.Errorf("%w: sub-filter %d: %w", ErrCorrupt, i, err)
		}
		t.victim.Store(victims[i])
	}
	if err := fr.finish(); err != nil {
		return nil, err
	}
	c.setup(ts)
	return c, nil
}

// countUsed returns the number of non-empty slots. It runs on a table no
// other goroutine reaches yet (a decode's): plain reads, and a bucket at a
// time where one fits in a word — at 10 M keys a slot at a time, with a
// branch per slot, was most of a snapshot's decode.
func (t *cuckooTable) countUsed() uint64 {
	ws := t.words
	var used uint64
	if t.swar {
		// A lane is non-empty if its low f−1 bits carry into its top bit
		// when added to all ones, or its top bit is set: no carry crosses
		// lanes.
		low := t.bucketMask &^ t.highs
		for i, o := uint64(0), uint64(0); i < t.buckets; i, o = i+1, o+t.bucketBits {
			w, s := o>>6, o&63
			v := ws[w] >> s
			if s+t.bucketBits > 64 {
				v |= ws[w+1] << (64 - s)
			}
			v &= t.bucketMask
			used += uint64(bits.OnesCount64(((v & low) + low | v) & t.highs))
		}
		return used
	}
	for j, o := uint64(0), uint64(0); j < t.buckets*t.b; j, o = j+1, o+t.f {
		w, s := o>>6, o&63
		v := ws[w] >> s
		if s+t.f > 64 {
			v |= ws[w+1] << (64 - s)
		}
		used += (v&t.mask + t.mask) >> t.f // 1 unless the slot is 0
	}
	return used
}

// check verifies that the bits past the last slot are zero and that the
// fingerprints in the table (plus the victim) number items.
func (t *cuckooTable) check(victim uint64) error {
	bits := t.buckets * t.b * t.f
	if r := bits % 64; r != 0 && t.words[len(t.words)-1]>>r != 0 {
		return fmt.Errorf("bits set past the last slot")
	}
	used := t.countUsed()
	if victim != 0 {
		used++
	}
	if used != t.items.Load() {
		return fmt.Errorf("%d fingerprints stored, header says %d", used, t.items.Load())
	}
	return nil
}
