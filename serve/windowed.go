package serve

import (
	"fmt"
	"io"
	"math"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// Expiring keys (BG.X*): a filter.Windowed each. Every add carries the
// item's expiry; the item is reported present at every moment up to and
// including it, and forgotten at most one window (MaxTTL/(G − 1)) after it,
// when the generation holding it is dropped whole. The Store drops
// generations on its own clock (Config.Now) about once a second, with no
// client action, so memory follows the items still live.
//
// Durability is the other filters': a create is logged as opCreate, each
// add as opXAdd with its absolute expiry, and a snapshot holds the
// generations with their absolute ends. Replay re-adds a logged item only if
// its expiry is still ahead, so nothing that expired during downtime comes
// back, and a snapshot's generations that ended are never consulted.

// expireSweepInterval is how often the Store drops the generations that
// ended.
const expireSweepInterval = time.Second

// Limits of ExpiringParams.
const (
	maxExpiringCapacity    = 1 << 30
	maxExpiringGenerations = 64
	maxExpiringTTL         = 10 * 365 * 24 * time.Hour
	defaultExpiringRate    = 0.001
	defaultExpiringGens    = 8
)

// ExpiringParams are the parameters of an expiring key (BG.XRESERVE).
type ExpiringParams struct {
	// MaxTTL is the longest an item can be remembered: an add's expiry may
	// lie at most this far ahead. Required; between 1 ms and ten years.
	MaxTTL time.Duration
	// Capacity is the number of adds expected within any one MaxTTL span
	// (the rate of adds × MaxTTL), which bounds the items live at once.
	// Each generation is sized for Capacity/(Generations − 1) items, the
	// adds whose expiries fall in one window. More adds, or expiries
	// bunched into one window, raise the false-positive rate, never cause
	// a false negative. Required; at most 2^30.
	Capacity uint64
	// ErrorRate is the target false-positive rate of a lookup across all
	// live generations. Default: 0.001.
	ErrorRate float64
	// Generations is the most generations held at once, G. More drop
	// expired items sooner (a window is MaxTTL/(G − 1)) but each lookup
	// checks more filters. Default: 8. Between 2 and 64.
	Generations int
}

func (p ExpiringParams) withDefaults() ExpiringParams {
	if p.ErrorRate == 0 {
		p.ErrorRate = defaultExpiringRate
	}
	if p.Generations == 0 {
		p.Generations = defaultExpiringGens
	}
	return p
}

func (p ExpiringParams) check() error {
	switch {
	case !(p.ErrorRate > 0 && p.ErrorRate < 1):
		return ErrBadErrorRate
	case p.Capacity < 1 || p.Capacity > maxExpiringCapacity:
		return ErrBadCapacity
	case p.MaxTTL < time.Millisecond || p.MaxTTL > maxExpiringTTL:
		return argError(ParamMaxTTL, fmt.Sprintf("max TTL must be in the range [1 ms, %d s]", int64(maxExpiringTTL/time.Second)))
	case p.Generations < 2 || p.Generations > maxExpiringGenerations:
		return argError(ParamGenerations, fmt.Sprintf("generations must be in the range [2, %d]", maxExpiringGenerations))
	}
	return nil
}

// generationCapacity is the capacity of one generation.
func (p ExpiringParams) generationCapacity() uint64 {
	g := uint64(p.Generations - 1)
	return (p.Capacity + g - 1) / g
}

// generationBytes is the size of one generation's table.
func (p ExpiringParams) generationBytes() (int64, error) {
	sz, err := filter.SizeWindowed(p.generationCapacity(), p.ErrorRate, p.Generations)
	if err != nil {
		return 0, err
	}
	return int64(sz.Bytes()), nil
}

// predictedBytes is the first generation's size; the key holds up to
// Generations of them.
func (p ExpiringParams) predictedBytes() int64 {
	n, err := p.generationBytes()
	if err != nil {
		return 0
	}
	return n
}

func (p ExpiringParams) build(now func() time.Time) (keyFilter, error) {
	f, err := filter.NewWindowed(filter.WindowedConfig{
		MaxTTL:      p.MaxTTL,
		Generations: p.Generations,
		Capacity:    p.generationCapacity(),
		FPRate:      p.ErrorRate,
		Now:         now,
	})
	if err != nil {
		return nil, err
	}
	return &expiringKey{wf: f, p: p}, nil
}

// expiringKey is an expiring key (KindExpiring): a filter.Windowed.
type expiringKey struct {
	wf   *filter.Windowed
	p    ExpiringParams
	card atomic.Uint64 // adds held, duplicates counted
	// failOpenUntil (Unix ns) makes the key answer "present" to every
	// lookup until then: set when replay could not hold an item. It is
	// the deletes field of the key's opPut record.
	failOpenUntil atomic.Int64
	// table is set for a table-backed expiring set: not logged, not
	// snapshotted, not deletable.
	table *expiringTable
}

// decodeExpiringKey decodes the filter of an opPut record, checking that
// it matches the record's parameters.
func decodeExpiringKey(rd io.Reader, cfg filter.DecodeConfig, spec Spec, now func() time.Time) (keyFilter, error) {
	wf, err := filter.DecodeWindowed(rd, cfg, now)
	if err != nil {
		return nil, err
	}
	p := spec.(ExpiringParams)
	if wf.MaxTTL() != p.MaxTTL || wf.Generations() != p.Generations ||
		wf.FPRate() != p.ErrorRate || wf.GenerationSizing().Capacity != p.generationCapacity() {
		return nil, errSpecMismatch(KindExpiring)
	}
	return &expiringKey{wf: wf, p: p}, nil
}

func (k *expiringKey) kind() Kind                    { return KindExpiring }
func (k *expiringKey) spec() Spec                    { return k.p }
func (k *expiringKey) subFilters() int               { return k.wf.Live() }
func (k *expiringKey) sizeBytes() int64              { return int64(k.wf.Bytes()) }
func (k *expiringKey) writeFilter(w io.Writer) error { _, err := k.wf.WriteTo(w); return err }

func (k *expiringKey) counters() (card, deletes uint64) {
	return k.card.Load(), uint64(k.failOpenUntil.Load())
}

func (k *expiringKey) setCounters(card, failOpenUntil uint64) error {
	if failOpenUntil > math.MaxInt64 {
		return fmt.Errorf("%w: fail-open time %d", errBadRecord, failOpenUntil)
	}
	k.card.Store(card)
	k.failOpenUntil.Store(int64(failOpenUntil))
	return nil
}

// replayHashes ignores the records of the other kinds' commands (an
// expiring key's adds are opXAdd records, replayXAdd).
func (k *expiringKey) replayHashes(byte, []uint64) {}

// expire drops the generations that ended. Nothing is logged: which
// generations ended follows from the clock, and replay re-derives it.
func (k *expiringKey) expire() int {
	n, err := k.wf.Expire()
	if err != nil {
		return 0
	}
	return n
}

// mayContain answers lookups; it never locks, and answers present to every
// lookup while the key fails open (failOpenUntil) or, for a table-backed
// set following a feed, while the set is not fresh.
func (k *expiringKey) mayContain(now func() time.Time, items [][]byte, out []bool) {
	t := now().UnixNano()
	if until := k.failOpenUntil.Load(); until != 0 && until >= t || k.table != nil && k.table.follow != nil && t > k.table.follow.freshUntil.Load() {
		for i := range out {
			out[i] = true
		}
		return
	}
	mayContainMany(k.wf.MayContain, items, out)
}

// count is 1 when the item may be present, else 0.
func (k *expiringKey) count(now func() time.Time, item []byte) int {
	out := make([]bool, 1)
	k.mayContain(now, [][]byte{item}, out)
	if out[0] {
		return 1
	}
	return 0
}

func (k *expiringKey) info() Info {
	info := ExpiringInfo{
		Params:             k.p,
		GenerationCapacity: k.wf.GenerationSizing().Capacity,
		Generations:        k.wf.Live(),
		Items:              k.wf.Items(),
		Size:               k.wf.Bytes(),
		MaxSize:            uint64(k.p.Generations) * k.wf.GenerationSizing().Bytes(),
	}
	if ends := k.wf.GenerationEnds(); len(ends) > 0 {
		info.NextExpiry = ends[0]
	}
	return Info{Kind: KindExpiring, Expiring: info}
}

// Errors of the expiring commands.
var (
	// ErrExpiryPast reports an add whose expiry has already passed.
	ErrExpiryPast = &Error{Code: CodeBadArgument, Param: ParamExpiry, Msg: "expiry is in the past"}
	// ErrExpiryBeyondTTL reports an add whose expiry lies further ahead
	// than the key's max TTL.
	ErrExpiryBeyondTTL = &Error{Code: CodeBadArgument, Param: ParamExpiry, Msg: "expiry is further ahead than the key's max TTL"}
	// ErrTooLargeFilter reports a create whose filter, at its most
	// generations, would exceed Config.MaxFilterBytes.
	ErrTooLargeFilter = &Error{Code: CodeBadArgument, Msg: "filter would exceed the largest filter the server stores"}
)

// Now reads the Store's clock (Config.Now).
func (s *Store) Now() time.Time { return s.cfg.Now() }

// reserve creates an empty expiring key (Reserve). It fails with ErrExists
// when the key exists, and with ErrTooLargeFilter when Generations
// generations would exceed Config.MaxFilterBytes.
func (p ExpiringParams) reserve(s *Store, name string) error {
	if err := s.checkWrite(); err != nil {
		return err
	}
	if s.sets[name] != nil {
		return ErrExists
	}
	p = p.withDefaults()
	if err := p.check(); err != nil {
		return err
	}
	gen, err := p.generationBytes()
	if err != nil {
		return &Error{Code: CodeBadArgument, Msg: "could not size filter"}
	}
	if gen > s.cfg.MaxFilterBytes/int64(p.Generations) {
		return ErrTooLargeFilter
	}
	_, err = s.create(name, p, true)
	return err
}

// expiring returns the expiring key name (ErrNotFound, ErrWrongType).
func (s *Store) expiring(name string) (*object, *expiringKey, error) {
	if s.sets[name] != nil {
		return nil, nil, ErrWrongType
	}
	o, _ := s.lookup(name)
	if o == nil {
		return nil, nil, ErrNotFound
	}
	k, ok := o.key.(*expiringKey)
	if !ok {
		return nil, nil, ErrWrongType
	}
	return o, k, nil
}

// AddUntil adds items to the expiring key name, each to be reported present
// at every moment up to and including expiresAt by the Store's clock.
// added[i] is true when item i was not reported present before (false: it
// may have been added before; it is remembered until expiresAt either way).
// A missing key is ErrNotFound (an expiring key needs its max TTL, so it is
// never created implicitly); an expiry before now is ErrExpiryPast, one
// further ahead than the max TTL ErrExpiryBeyondTTL. The add is logged
// before it is applied and returns once durable per the fsync policy.
func (s *Store) AddUntil(name string, items [][]byte, expiresAt time.Time) ([]bool, error) {
	if err := s.checkWrite(); err != nil {
		return nil, err
	}
	for {
		o, k, err := s.expiring(name)
		if err != nil {
			return nil, err
		}
		o.mu.Lock()
		if o.dead {
			o.mu.Unlock()
			continue
		}
		added, pos, err := s.xadd(o, k, items, expiresAt)
		o.mu.Unlock()
		if err == nil {
			err = s.waitDurable(pos)
		}
		return added, err
	}
}

// xadd logs and applies an add to o, whose key is k, under o.mu.
func (s *Store) xadd(o *object, k *expiringKey, items [][]byte, expiresAt time.Time) ([]bool, int64, error) {
	now := s.cfg.Now()
	switch ttl := expiresAt.Sub(now); {
	case now.Year() < 1800 || now.Year() > 2200:
		return nil, 0, &Error{Code: CodeClock, Msg: "server clock out of range: " + now.String()}
	case ttl < 0:
		return nil, 0, ErrExpiryPast
	case ttl > k.p.MaxTTL:
		return nil, 0, ErrExpiryBeyondTTL
	}
	added := make([]bool, len(items))
	hashes := make([]uint64, len(items))
	for i, it := range items {
		hashes[i] = k.wf.Hash(it)
		added[i] = !k.wf.MayContainHash(hashes[i])
	}
	var pos int64
	if k.table == nil { // a table-backed set's record is the row
		r := &record{op: opXAdd, name: o.name, hashes: hashes, expiry: expiresAt.UnixNano()}
		var err error
		if pos, err = s.logRecord(r); err != nil {
			return nil, 0, err
		}
		o.lsn = r.lsn
	}
	o.dump = nil
	for _, h := range hashes {
		// After the checks above only a clock stepped back can make the
		// filter refuse (all generations taken by later windows).
		if err := k.wf.AddHash(h, expiresAt); err != nil {
			s.remeasure(o)
			return nil, 0, &Error{Code: CodeFull, Msg: err.Error()}
		}
	}
	k.card.Add(uint64(len(hashes)))
	s.remeasure(o)
	return added, pos, nil
}

// replayXAdd re-applies a logged add under the current clock: an item whose
// expiry passed is not brought back. When the filter cannot hold an item
// (the clock stepped back past what G generations span), the key answers
// "present" to every lookup until the item's expiry rather than forget it,
// and says so in the log.
func (s *Store) replayXAdd(o *object, k *expiringKey, r *record) {
	exp := time.Unix(0, r.expiry)
	for _, h := range r.hashes {
		if err := k.wf.ReplayHash(h, exp); err != nil {
			if r.expiry > k.failOpenUntil.Load() {
				k.failOpenUntil.Store(r.expiry)
			}
			s.log.Error("replay: expiring key cannot hold an item; it answers present to every lookup until the item's expiry",
				"key", o.name, "until", exp, "err", err)
			return
		}
	}
	k.card.Add(uint64(len(r.hashes)))
}

// ExpiringInfo describes an expiring key.
type ExpiringInfo struct {
	Params ExpiringParams // as created, defaults filled in
	// GenerationCapacity is the items one generation is sized for.
	GenerationCapacity uint64
	// Generations is the number of generations held now.
	Generations int
	// Items counts the adds held by those generations (duplicates
	// counted); an item counts until its generation is dropped, at most
	// one window after its expiry.
	Items uint64
	// Size is the bytes held now; MaxSize the bytes at Params.Generations.
	Size, MaxSize uint64
	// NextExpiry is when the oldest generation is dropped (zero when none
	// is held).
	NextExpiry time.Time
}

// startExpiry starts the goroutine that drops ended generations.
func (s *Store) startExpiry() {
	s.bgDone.Add(1)
	go func() {
		defer s.bgDone.Done()
		tick := time.NewTicker(expireSweepInterval)
		defer tick.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-tick.C:
				s.expireAll()
			}
		}
	}()
}

// expireAll drops the generations that ended from every expiring key and
// returns how many it dropped.
func (s *Store) expireAll() int {
	s.mu.RLock()
	var objs []*object
	for _, o := range s.keys {
		if _, ok := o.key.(*expiringKey); ok {
			objs = append(objs, o)
		}
	}
	s.mu.RUnlock()
	n := 0
	for _, o := range objs {
		o.mu.Lock()
		if !o.dead {
			n += s.expireObject(o)
		}
		o.mu.Unlock()
	}
	return n
}

// expireObject drops what ended from o (an expiring key's generations) and
// releases its memory. Call with o.mu held.
func (s *Store) expireObject(o *object) int {
	n := o.key.expire()
	if n == 0 {
		return 0
	}
	o.dump = nil
	s.remeasure(o)
	return n
}
