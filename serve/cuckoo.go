package serve

import (
	"io"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// CuckooParams are the parameters of a cuckoo key (CF.RESERVE, CF.INSERT).
// The zero value of a field means its default (Config.CuckooDefaults, whose
// own defaults are RedisBloom's).
type CuckooParams struct {
	// Capacity is the number of items the first sub-filter accepts.
	// Default: 1024.
	Capacity uint64
	// BucketSize is the number of fingerprints per bucket, 1 to 255 as in
	// RedisBloom; the filter uses the next of 2, 4 or 8 at or above it (8
	// for anything above 4). Default: 2.
	BucketSize int
	// MaxIterations bounds the relocations one insert makes. Default: 20.
	MaxIterations int
	// Expansion is RedisBloom's expansion factor: 0 means the filter never
	// grows (a full filter refuses items); any other value lets it grow,
	// each new sub-filter twice the size of the one before, up to
	// maxCuckooFilters sub-filters. It is reported by CF.INFO as given.
	// Default: 1. Set NoExpansion for 0.
	Expansion int
	// NoExpansion means Expansion 0 (a zero Expansion means the default).
	NoExpansion bool
}

// maxCuckooFilters is the number of sub-filters a growing cuckoo key may
// have. RedisBloom's cf-max-expansions is 32; filter.Cuckoo gives each
// sub-filter one more fingerprint bit, and 20 keep them within 32 bits.
const maxCuckooFilters = 20

// defaultCuckooParams are RedisBloom's auto-create defaults.
var defaultCuckooParams = CuckooParams{BucketSize: 2, Capacity: 1024, MaxIterations: 20, Expansion: 1}

func (p CuckooParams) withDefaults() CuckooParams { return p.merge(defaultCuckooParams) }

func (p CuckooParams) merge(d CuckooParams) CuckooParams {
	if p.BucketSize == 0 {
		p.BucketSize = d.BucketSize
	}
	if p.Capacity == 0 {
		p.Capacity = d.Capacity
	}
	if p.MaxIterations == 0 {
		p.MaxIterations = d.MaxIterations
	}
	if p.Expansion == 0 && !p.NoExpansion {
		p.Expansion, p.NoExpansion = d.Expansion, d.NoExpansion
	}
	return p
}

func (p CuckooParams) check() error {
	switch {
	case p.BucketSize < 1 || p.BucketSize > 255:
		return ErrBadBucketSize
	case p.MaxIterations < 1 || p.MaxIterations > 65535:
		return ErrBadMaxIterations
	case p.Expansion < 0 || p.Expansion > 32768:
		return ErrBadExpansion
	case p.Capacity < 2*uint64(p.BucketSize) || p.Capacity > 1<<30:
		return ErrBadCuckooCapacity
	}
	return nil
}

// bucketSize is the bucket size the filter uses for p.BucketSize.
func (p CuckooParams) bucketSize() int {
	switch {
	case p.BucketSize <= 2:
		return 2
	case p.BucketSize <= 4:
		return 4
	}
	return 8
}

// redisBloomSlots is the slots of RedisBloom's first table for p:
// next power of two of Capacity/BucketSize buckets of BucketSize slots.
func (p CuckooParams) redisBloomSlots() uint64 {
	b := max(uint64(p.BucketSize), 1)
	n := uint64(1)
	for n < p.Capacity/b {
		n <<= 1
	}
	return n * b
}

func (p CuckooParams) maxFilters() int {
	if p.Expansion == 0 {
		return 1
	}
	return maxCuckooFilters
}

// predictedBytes is a generous estimate of the first sub-filter's size.
func (p CuckooParams) predictedBytes() int64 { return int64(p.Capacity) * 2 }

func (p CuckooParams) build(func() time.Time) (keyFilter, error) {
	b := p.bucketSize()
	f, err := filter.NewCuckoo(filter.CuckooConfig{
		Capacity: p.Capacity,
		// RedisBloom's 8-bit fingerprints give about 2b/255.
		FPRate:     2 * float64(b) / 255,
		BucketSize: b,
		MaxKicks:   p.MaxIterations,
		MaxFilters: p.maxFilters(),
	})
	if err != nil {
		return nil, err
	}
	return &cuckooKey{f: f, p: p}, nil
}

// cuckooKey is a cuckoo key (KindCuckoo).
type cuckooKey struct {
	f       *filter.Cuckoo
	p       CuckooParams
	card    atomic.Uint64 // fingerprints inserted
	deletes atomic.Uint64 // successful deletes
}

func decodeCuckooKey(rd io.Reader, cfg filter.DecodeConfig, spec Spec, _ func() time.Time) (keyFilter, error) {
	f, err := filter.DecodeCuckoo(rd, cfg)
	if err != nil {
		return nil, err
	}
	return &cuckooKey{f: f, p: spec.(CuckooParams)}, nil
}

func (k *cuckooKey) kind() Kind                       { return KindCuckoo }
func (k *cuckooKey) spec() Spec                       { return k.p }
func (k *cuckooKey) subFilters() int                  { return len(k.f.FingerprintBits()) }
func (k *cuckooKey) sizeBytes() int64                 { return int64(k.f.Bytes()) } // not Stats: O(1)
func (k *cuckooKey) writeFilter(w io.Writer) error    { _, err := k.f.WriteTo(w); return err }
func (k *cuckooKey) counters() (card, deletes uint64) { return k.card.Load(), k.deletes.Load() }
func (k *cuckooKey) expire() int                      { return 0 }
func (k *cuckooKey) hash(item []byte) uint64          { return filter.Hash(item, k.f.Seed()) }

func (k *cuckooKey) setCounters(card, deletes uint64) error {
	k.card.Store(card)
	k.deletes.Store(deletes)
	return nil
}

func (k *cuckooKey) mayContain(_ func() time.Time, items [][]byte, out []bool) {
	mayContainMany(k.f.MayContain, items, out)
}

func (k *cuckooKey) count(_ func() time.Time, item []byte) int { return k.f.Count(item) }

func (k *cuckooKey) replayHashes(op byte, hashes []uint64) {
	for _, h := range hashes {
		switch {
		case op == opRemove:
			k.removeHash(h)
		default:
			k.addHash(h, op == opAddNX)
		}
	}
}

// reserve creates an empty cuckoo key (Reserve). It fails with ErrExists when
// the key exists.
func (p CuckooParams) reserve(s *Store, name string) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if s.sets[name] != nil {
		return ErrWrongType // a set answers BF.*, not CF.*
	}
	_, err := s.create(name, p.merge(s.cfg.CuckooDefaults), true)
	return err
}

// InsertResult is what Insert did with one item.
type InsertResult int8

// Insert results.
const (
	InsertNoRoom  InsertResult = -1 // the filter had no room for it
	InsertSkipped InsertResult = 0  // IfAbsent: the filter may hold it already
	Inserted      InsertResult = 1
)

// InsertOptions are the options of Insert.
type InsertOptions struct {
	// Create holds the parameters of the cuckoo key created when name is
	// missing; zero fields take Config.CuckooDefaults. Fields that are set
	// are checked even when the key exists.
	Create CuckooParams
	// NoCreate makes a missing key ErrNotFound instead of creating it.
	NoCreate bool
	// IfAbsent skips the items the filter may hold already.
	IfAbsent bool
}

// Insert inserts a copy of each item into the cuckoo key (or table-backed
// set) name, creating the key per opt unless opt.NoCreate. Unlike Add it
// counts copies: an item inserted twice can be removed twice. res[i] says
// what became of item i; where it is InsertNoRoom, full says why (ErrFull, or ErrGrowthLimit for a
// filter that grew as far as it may). err reports a failure of the whole
// call, after which nothing changed.
//
// On a table-backed set the items are added to its gate: res[i] is
// Inserted, or InsertSkipped with IfAbsent when the gate already reports the
// item as maybe present.
func (s *Store) Insert(name string, items [][]byte, opt InsertOptions) (res []InsertResult, full, err error) {
	create, noCreate, nx := opt.Create, opt.NoCreate, opt.IfAbsent
	if set := s.sets[name]; set != nil {
		return set.addCuckoo(items, nx)
	}
	if err := s.checkWrite(); err != nil {
		return nil, nil, err
	}
	spec := create.merge(s.cfg.CuckooDefaults)
	if create != (CuckooParams{}) {
		if err := spec.check(); err != nil {
			return nil, nil, err // checked even when the key exists, as RedisBloom
		}
	}
	for {
		o, err := s.getOrCreate(name, KindCuckoo, noCreate, func() Spec { return spec })
		if err != nil {
			return nil, nil, err
		}
		k, ok := o.key.(*cuckooKey)
		if !ok {
			return nil, nil, ErrWrongType
		}
		o.mu.Lock()
		if o.dead {
			o.mu.Unlock()
			continue
		}
		// Log first, then apply: a write that could not be logged changes
		// nothing. The record lists every item's hash; replay applies it
		// with the same deterministic rule, so items that did not fit fail
		// there too.
		op := opAdd
		if nx {
			op = opAddNX
		}
		// The hashes are scratch: the log copies them into its record
		// frame before Append returns (escape analysis cannot see that, so a make
		// here was an allocation per insert).
		scratch := getHashes(len(items))
		hashes := scratch.h
		seed := k.f.Seed()
		for i, it := range items {
			hashes[i] = filter.Hash(it, seed)
		}
		pos, err := s.commit(o, op, hashes)
		if err != nil {
			putHashes(scratch)
			o.mu.Unlock()
			return nil, nil, err
		}
		res, full := k.add(hashes, nx)
		putHashes(scratch)
		s.remeasure(o)
		o.mu.Unlock()
		return res, full, s.waitDurable(pos)
	}
}

func (k *cuckooKey) add(hashes []uint64, nx bool) (res []InsertResult, full error) {
	res = make([]InsertResult, len(hashes))
	for i, h := range hashes {
		res[i] = k.addHash(h, nx)
		if res[i] == InsertNoRoom {
			full = ErrFull
			if k.p.maxFilters() > 1 {
				full = ErrGrowthLimit
			}
		}
	}
	return res, full
}

// addHash inserts h (with nx, only if k may not hold it) and says
// what it did.
//
// A filter that may not grow holds at most as many items as RedisBloom's
// table for the same parameters has slots (redisBloomSlots), though its own
// table is sized differently (see docs/serve.md).
func (k *cuckooKey) addHash(h uint64, nx bool) InsertResult {
	if nx && k.f.MayContainHash(h) {
		return InsertSkipped
	}
	if p := k.p; p.maxFilters() == 1 && k.card.Load()-k.deletes.Load() >= p.redisBloomSlots() {
		return InsertNoRoom
	}
	if k.f.AddHash(h) != nil {
		return InsertNoRoom
	}
	k.card.Add(1)
	return Inserted
}

// removeHash removes one copy of h and reports whether it did.
func (k *cuckooKey) removeHash(h uint64) bool {
	if k.f.RemoveHash(h) != nil {
		return false
	}
	k.deletes.Add(1)
	return true
}

// Count returns how many copies of item the cuckoo key name may hold (it
// can overcount, never undercount). A table-backed set or an expiring key
// gives 1 when the item may be present; a missing key or a Bloom key 0.
func (s *Store) Count(name string, item []byte) int {
	if set := s.sets[name]; set != nil {
		out := make([]bool, 1)
		set.mayContain([][]byte{item}, out)
		if out[0] {
			return 1
		}
		return 0
	}
	if o, _ := s.lookup(name); o != nil {
		return o.key.count(s.cfg.Now, item)
	}
	return 0
}

// Remove removes one copy of item from the cuckoo key name and reports
// whether it did. A missing key is ErrNotFound. When the filter cannot
// tell the item's copy from another item's (a fingerprint match in more than
// one sub-filter), nothing is removed and Remove returns false, so no other
// item becomes a false negative.
//
// On a table-backed set it removes the item from the gate when the gate's
// filter can remove keys, and returns false when it cannot.
func (s *Store) Remove(name string, item []byte) (bool, error) {
	if set := s.sets[name]; set != nil {
		return set.remove(item)
	}
	if s.closed.Load() {
		return false, ErrClosed
	}
	for {
		o, _ := s.lookup(name)
		if o == nil {
			return false, ErrNotFound
		}
		k, ok := o.key.(*cuckooKey)
		if !ok {
			return false, ErrWrongType
		}
		o.mu.Lock()
		if o.dead {
			o.mu.Unlock()
			continue
		}
		h := k.hash(item)
		if !k.f.MayContainHash(h) {
			o.mu.Unlock()
			return false, nil // nothing to remove, nothing to log
		}
		pos, err := s.commit(o, opRemove, []uint64{h})
		if err != nil {
			o.mu.Unlock()
			return false, err
		}
		ok = k.removeHash(h)
		o.mu.Unlock()
		if err := s.waitDurable(pos); err != nil {
			return false, err
		}
		return ok, nil
	}
}

// CuckooInfo describes a cuckoo key.
type CuckooInfo struct {
	Capacity      uint64 // items all sub-filters accept together
	Size          uint64 // bytes of the tables
	Buckets       uint64 // buckets in all sub-filters
	Filters       int    // sub-filters
	Inserted      uint64 // items held: successful inserts minus successful deletes, as RedisBloom
	Deleted       uint64 // successful deletes
	BucketSize    int    // slots per bucket in use (2, 4 or 8)
	Expansion     int    // as created
	MaxIterations int
}

func (k *cuckooKey) info() Info {
	st := k.f.Stats()
	b := k.f.BucketSize()
	// Sub-filter i has about 2^i times the buckets of the first; its slots
	// are FingerprintBits()[i] wide. Exact for one sub-filter.
	fps := k.f.FingerprintBits()
	var weighted uint64
	for i, f := range fps {
		weighted += uint64(f) << i
	}
	var buckets uint64
	if weighted > 0 {
		first := st.Bits / (uint64(b) * weighted)
		buckets = first * ((1 << len(fps)) - 1)
	}
	return Info{Kind: KindCuckoo, Cuckoo: CuckooInfo{
		Capacity:      st.Capacity,
		Size:          st.Bytes,
		Buckets:       buckets,
		Filters:       len(fps),
		Inserted:      k.card.Load() - k.deletes.Load(),
		Deleted:       k.deletes.Load(),
		BucketSize:    b,
		Expansion:     k.p.Expansion,
		MaxIterations: k.p.MaxIterations,
	}}
}
