package serve

import (
	"errors"
	"io"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// BloomParams are the parameters of a Bloom key (BF.RESERVE, BF.INSERT).
// The zero value of a field means its default (Config.BloomDefaults, whose
// own defaults are RedisBloom's).
type BloomParams struct {
	// Capacity is the number of items the first sub-filter holds.
	// Default: 100.
	Capacity uint64
	// ErrorRate bounds the false-positive rate of the whole filter, however
	// far it grows (the first sub-filter gets half of it, each further one
	// half of the one before, as RedisBloom). A NonScaling filter's one
	// sub-filter also gets half (RedisBloom gives it the whole rate), so it
	// is a little larger and more accurate. Default: 0.01.
	ErrorRate float64
	// Expansion is how many times larger each new sub-filter is.
	// Default: 2. At most 32768, as RedisBloom; the filter grows by at
	// most 64 times per sub-filter (a larger factor is reported as given
	// but grows by 64: already the second sub-filter then holds 4096 times
	// the first).
	Expansion uint32
	// NonScaling makes the filter refuse items (ErrFull) once it
	// holds Capacity, instead of growing. RedisBloom's EXPANSION 0 means this.
	NonScaling bool
}

// maxBloomExpansion is RedisBloom's largest expansion; maxBloomGrowth the
// largest filter.Scalable grows by.
const (
	maxBloomExpansion = 32768
	maxBloomGrowth    = 64
)

// defaultBloomParams are RedisBloom's auto-create defaults.
var defaultBloomParams = BloomParams{Capacity: 100, ErrorRate: 0.01, Expansion: 2}

func (p BloomParams) withDefaults() BloomParams { return p.merge(defaultBloomParams) }

// merge fills the zero fields of p from d.
func (p BloomParams) merge(d BloomParams) BloomParams {
	if p.Capacity == 0 {
		p.Capacity = d.Capacity
	}
	if p.ErrorRate == 0 {
		p.ErrorRate = d.ErrorRate
	}
	if p.Expansion == 0 && !p.NonScaling {
		p.Expansion = d.Expansion
		p.NonScaling = d.NonScaling
	}
	return p
}

func (p BloomParams) check() error {
	switch {
	case !(p.ErrorRate > 0 && p.ErrorRate < 1):
		return ErrBadErrorRate
	case p.Capacity < 1 || p.Capacity > 1<<30:
		return ErrBadCapacity
	case p.Expansion > maxBloomExpansion:
		return ErrBadExpansion
	}
	return nil
}

// predictedBytes estimates the first sub-filter's size before it is built.
func (p BloomParams) predictedBytes() int64 {
	sz, err := filter.SizeBloom(p.Capacity, p.ErrorRate/2)
	if err != nil {
		return 0
	}
	return int64(sz.Bytes())
}

func (p BloomParams) build(func() time.Time) (keyFilter, error) {
	exp := min(p.Expansion, maxBloomGrowth)
	if p.NonScaling {
		exp = 0 // filter default; never used without growth
	}
	f, err := filter.NewScalable(filter.ScalableConfig{
		InitialCapacity: p.Capacity,
		FPRate:          p.ErrorRate,
		Expansion:       exp,
		NoScale:         p.NonScaling,
	})
	if err != nil {
		return nil, err
	}
	return &bloomKey{f: f, p: p}, nil
}

// bloomKey is a Bloom key (KindBloom): a scalable Bloom filter.
type bloomKey struct {
	f    *filter.Scalable
	p    BloomParams
	card atomic.Uint64 // adds that were new (BF.CARD)
	// deletes is the opPut record's deletes field as restored, written back
	// as read (a Bloom key deletes nothing; a dump round-trips whole).
	deletes uint64
}

func decodeBloomKey(rd io.Reader, cfg filter.DecodeConfig, spec Spec, _ func() time.Time) (keyFilter, error) {
	f, err := filter.DecodeScalable(rd, cfg)
	if err != nil {
		return nil, err
	}
	return &bloomKey{f: f, p: spec.(BloomParams)}, nil
}

func (k *bloomKey) kind() Kind                       { return KindBloom }
func (k *bloomKey) spec() Spec                       { return k.p }
func (k *bloomKey) subFilters() int                  { return k.f.Filters() }
func (k *bloomKey) sizeBytes() int64                 { return int64(k.f.Bytes()) } // not Stats: O(1)
func (k *bloomKey) writeFilter(w io.Writer) error    { _, err := k.f.WriteTo(w); return err }
func (k *bloomKey) counters() (card, deletes uint64) { return k.card.Load(), k.deletes }
func (k *bloomKey) expire() int                      { return 0 }

func (k *bloomKey) setCounters(card, deletes uint64) error {
	k.card.Store(card)
	k.deletes = deletes
	return nil
}

// mayContain hashes the items and looks them up in one batch
// (filter.Scalable.MayContainHashMany).
func (k *bloomKey) mayContain(_ func() time.Time, items [][]byte, out []bool) {
	scratch := getHashes(len(items))
	hs := scratch.h
	for i, it := range items {
		hs[i] = k.f.Hash(it)
	}
	k.f.MayContainHashMany(hs, out)
	putHashes(scratch)
}

// count is 0: a Bloom key counts no copies (CF.COUNT answers 0, as
// RedisBloom for a key of another type).
func (k *bloomKey) count(func() time.Time, []byte) int { return 0 }

// replayHashes adds the hashes of any record (see bloomAddAll).
func (k *bloomKey) replayHashes(_ byte, hashes []uint64) { k.addAll(hashes) }

func (k *bloomKey) info() Info {
	st := k.f.Stats()
	info := BloomInfo{Capacity: st.Capacity, Size: st.Bytes, Filters: k.f.Filters(), Items: k.card.Load()}
	if !k.p.NonScaling {
		info.Expansion = k.p.Expansion
	}
	return Info{Kind: KindBloom, Bloom: info}
}

// reserve creates an empty Bloom key (Reserve). It fails with ErrExists when
// the key exists.
func (p BloomParams) reserve(s *Store, name string) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if s.sets[name] != nil {
		return ErrExists // a set answers BF.* as a Bloom key
	}
	_, err := s.create(name, p.merge(s.cfg.BloomDefaults), true)
	return err
}

// AddOptions are the options of Add.
type AddOptions struct {
	// Create holds the parameters of the Bloom key created when name is
	// missing; zero fields take Config.BloomDefaults. Fields that are set
	// are checked even when the key exists.
	Create BloomParams
	// NoCreate makes a missing key ErrNotFound instead of creating it.
	NoCreate bool
}

// Add adds items to the key name: a Bloom key (created per opt unless
// opt.NoCreate) or a table-backed set (AddUntil adds to an expiring key).
// added[i] reports whether item i was new (not reported present
// before it was added). When the filter refuses an item, added ends before
// it and stop says why (ErrFull, ErrGrowthLimit); later items are not
// processed. err reports a failure of the whole call (ErrWrongType,
// ErrNotFound, ErrOOM), after which nothing changed. The add is logged
// before it is applied and returns once durable per the fsync policy.
//
// On a table-backed set the items are added to its gate (call it before the
// row's transaction commits); added[i] is true when the gate did not already
// report the item as maybe present.
func (s *Store) Add(name string, items [][]byte, opt AddOptions) (added []bool, stop, err error) {
	return s.AppendAdd(make([]bool, 0, len(items)), name, items, opt)
}

// AppendAdd is Add with its replies appended to dst (added is dst extended
// by one reply per item answered), so that a caller reusing dst, a front
// end answering one request after another, allocates nothing.
func (s *Store) AppendAdd(dst []bool, name string, items [][]byte, opt AddOptions) (added []bool, stop, err error) {
	create, noCreate := opt.Create, opt.NoCreate
	at := len(dst)
	dst = grow(dst, len(items))
	if set := s.sets[name]; set != nil {
		added, stop, err := set.add(items, dst[at:])
		if err != nil {
			return nil, stop, err
		}
		return dst[:at+len(added)], stop, nil
	}
	if err := s.checkWrite(); err != nil {
		return nil, nil, err
	}
	spec := create.merge(s.cfg.BloomDefaults)
	if create != (BloomParams{}) {
		if err := spec.check(); err != nil {
			return nil, nil, err // checked even when the key exists, as RedisBloom
		}
	}
	for {
		o, err := s.getOrCreate(name, KindBloom, noCreate, func() Spec { return spec })
		if err != nil {
			return nil, nil, err
		}
		k, ok := o.key.(*bloomKey)
		if !ok {
			return nil, nil, ErrWrongType
		}
		o.mu.Lock()
		if o.dead {
			o.mu.Unlock()
			continue
		}
		// Log first, then apply: a write that could not be logged changes
		// nothing.
		var pos int64
		scratch := getHashes(2 * len(items))
		hs := scratch.h[:len(items)]
		for i, it := range items {
			hs[i] = k.f.Hash(it)
		}
		flags := dst[at:] // the lookups' answers, then the replies
		if hashes := k.candidates(hs, flags, scratch.h[len(hs):len(hs)]); len(hashes) > 0 {
			pos, err = s.commit(o, opAdd, hashes)
			if err != nil {
				o.mu.Unlock()
				putHashes(scratch)
				return nil, nil, err
			}
		}
		added, stop := k.add(hs, flags)
		s.remeasure(o)
		o.mu.Unlock()
		putHashes(scratch)
		return dst[:at+len(added)], stop, s.waitDurable(pos)
	}
}

// candidates returns the hashes k does not hold yet, each once: the
// opAdd record for adding them, appended to buf. The lookups go in one
// batch (filter.Scalable.MayContainHashMany) into held, len(hs) long. Call
// with o.mu held.
func (k *bloomKey) candidates(hs []uint64, held []bool, buf []uint64) []uint64 {
	if k.f.MayContainHashMany(hs, held) == len(hs) {
		return nil
	}
	hashes := buf[:0]
	for i, h := range hs {
		if !held[i] {
			hashes = append(hashes, h)
		}
	}
	return dedupFirst(hashes)
}

// dedupFirst drops the repeats of hs in place, keeping each hash's first
// place. A batch whose hashes are all distinct (the common case) is found so
// with a sorted copy, in O(n log n); one with repeats is scanned pairwise.
func dedupFirst(hs []uint64) []uint64 {
	if len(hs) > 16 {
		var buf [256]uint64
		sorted := append(buf[:0], hs...)
		slices.Sort(sorted)
		if len(slices.Compact(sorted)) == len(hs) {
			return hs
		}
	}
	out := hs[:0]
	for _, h := range hs {
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	return out
}

// add adds the items with hashes hs under o.mu, with the rule replay
// applies to their opAdd record (replayHashes): an item is added unless k may
// hold it already, so added[i] is what a MayContainHash and then an AddHash
// for one item after the other would report. The filter takes them in one batch
// (filter.Scalable.AddAbsentHashes), which fetches the blocks of a group of
// items before it looks them up. The replies go into buf, len(hs) long.
func (k *bloomKey) add(hs []uint64, buf []bool) (added []bool, stop error) {
	added = buf
	n, err := k.f.AddAbsentHashes(hs, added)
	added = added[:n]
	k.countNew(added)
	if err != nil {
		if errors.Is(err, filter.ErrFull) && k.p.NonScaling {
			return added, ErrFull
		}
		return added, ErrGrowthLimit
	}
	return added, nil
}

// addAll is add for a replayed record: a hash the filter refuses
// is skipped and the ones after it are still tried, as one item after the
// other would be.
func (k *bloomKey) addAll(hs []uint64) {
	added := make([]bool, len(hs))
	for len(hs) > 0 {
		n, err := k.f.AddAbsentHashes(hs, added)
		k.countNew(added[:n])
		if err == nil {
			return
		}
		hs = hs[n+1:]
	}
}

// countNew adds the items added reports new to k's BF.CARD.
func (k *bloomKey) countNew(added []bool) {
	var n uint64
	for _, a := range added {
		if a {
			n++
		}
	}
	k.card.Add(n)
}

// commit logs a record of hashes for o (under o.mu), before they are
// applied, and stamps o with its LSN.
func (s *Store) commit(o *object, op byte, hashes []uint64) (int64, error) {
	r := &record{op: op, name: o.name, hashes: hashes}
	pos, err := s.logRecord(r)
	if err != nil {
		return 0, err
	}
	o.dump = nil
	o.lsn = r.lsn
	return pos, nil
}

// MayContain reports for each item whether the key name may hold it, and
// the kind of the key that answered. A missing key holds nothing
// (KindNone). A table-backed set that is not ready answers true; an
// expiring key holds an item until its expiry. Front ends that must answer
// a key of another kind as empty look at kind.
func (s *Store) MayContain(name string, items [][]byte) (held []bool, kind Kind) {
	return s.AppendMayContain(make([]bool, 0, len(items)), name, items)
}

// AppendMayContain is MayContain with its answers appended to dst (held is
// dst extended by one answer per item), so that a caller reusing dst, a
// front end answering one request after another, allocates nothing.
func (s *Store) AppendMayContain(dst []bool, name string, items [][]byte) (held []bool, kind Kind) {
	at := len(dst)
	dst = grow(dst, len(items))
	out := dst[at:]
	if set := s.sets[name]; set != nil {
		set.mayContain(items, out)
		return dst, KindSet
	}
	o, kind := s.lookup(name)
	if o != nil {
		o.key.mayContain(s.cfg.Now, items, out) // an expiring key: never a false "absent"
	}
	return dst, kind
}

// grow extends dst by n false values.
func grow(dst []bool, n int) []bool {
	dst = slices.Grow(dst, n)
	at := len(dst)
	dst = dst[:at+n]
	clear(dst[at:])
	return dst
}

// mayContainMany answers a batch of lookups on a standalone filter, one at a
// time (filter.Cuckoo and filter.Windowed have no batched lookup;
// table-backed sets use the gate's MayContainMany).
func mayContainMany(mayContain func([]byte) bool, items [][]byte, out []bool) {
	for i, it := range items {
		out[i] = mayContain(it)
	}
}

// Cardinality returns the number of items added to the Bloom key (or
// table-backed set) name that were new (0 for a missing key; ErrWrongType
// for a key of another kind).
func (s *Store) Cardinality(name string) (uint64, error) {
	if set := s.sets[name]; set != nil {
		return set.gate.Stats().Filter.Items, nil
	}
	o, _ := s.lookup(name)
	if o == nil {
		return 0, nil
	}
	if k, ok := o.key.(*bloomKey); ok {
		return k.card.Load(), nil
	}
	return 0, ErrWrongType
}

// BloomInfo describes a Bloom key or a table-backed set.
type BloomInfo struct {
	Capacity uint64 // keys all sub-filters hold together
	Size     uint64 // bytes of the sub-filters' tables
	Filters  int    // sub-filters
	Items    uint64 // items added that were new (BF.CARD)
	// Expansion is the growth factor; 0 for a non-scaling filter
	// (BF.INFO replies nil).
	Expansion uint32
}

// bloomInfo describes the set's gate's filter as a Bloom key.
func (t *Set) bloomInfo() BloomInfo {
	st := t.gate.Stats().Filter
	return BloomInfo{Capacity: st.Capacity, Size: st.Bytes, Filters: 1, Items: st.Items}
}

// hashPool holds scratch space for a batch's hashes, so that a pipelined
// run of adds or lookups leaves no garbage behind: the collector then has
// nothing to do between commands, however close the memory limit (see
// internal/cli/memlimit.go) sits to the filters.
var hashPool = sync.Pool{New: func() any { return new(hashBuf) }}

// hashBuf is hashPool's element (a pointer, so Put does not allocate).
type hashBuf struct{ h []uint64 }

// maxPooledHashes bounds the scratch space kept in hashPool; a larger batch
// (a huge BF.MADD) gets space of its own.
const maxPooledHashes = 4096

// getHashes returns scratch space for n hashes in b.h[:n]; give it back with
// putHashes.
func getHashes(n int) *hashBuf {
	b := hashPool.Get().(*hashBuf)
	if cap(b.h) < n {
		b.h = make([]uint64, max(n, 64))
	}
	b.h = b.h[:n]
	return b
}

// putHashes gives b back to hashPool.
func putHashes(b *hashBuf) {
	if cap(b.h) <= maxPooledHashes {
		hashPool.Put(b)
	}
}
