package serve

import (
	"fmt"
	"math"
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

func (p ExpiringParams) build(now func() time.Time) (*filter.Windowed, error) {
	return filter.NewWindowed(filter.WindowedConfig{
		MaxTTL:      p.MaxTTL,
		Generations: p.Generations,
		Capacity:    p.generationCapacity(),
		FPRate:      p.ErrorRate,
		Now:         now,
	})
}

// expiringFrom wraps the decoded filter of the opPut record r, checking that
// it matches r's parameters.
func expiringFrom(r *record, wf *filter.Windowed) (*object, error) {
	p := r.meta.expiry
	if wf.MaxTTL() != p.MaxTTL || wf.Generations() != p.Generations ||
		wf.FPRate() != p.ErrorRate || wf.GenerationSizing().Capacity != p.generationCapacity() {
		return nil, fmt.Errorf("%w: expiring filter does not match its parameters", errBadRecord)
	}
	if r.deletes > math.MaxInt64 {
		return nil, fmt.Errorf("%w: fail-open time %d", errBadRecord, r.deletes)
	}
	o := &object{name: r.name, kind: KindExpiring, meta: r.meta, wf: wf}
	o.failOpenUntil.Store(int64(r.deletes))
	o.filters = o.subFilters()
	o.bytes = o.sizeBytes()
	return o, nil
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

// reserveExpiring creates an empty expiring key. It fails with ErrExists
// when the key exists, and with ErrTooLargeFilter when Generations
// generations would exceed Config.MaxFilterBytes.
func (s *Store) reserveExpiring(name string, p ExpiringParams) error {
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
	_, err = s.create(name, meta{kind: KindExpiring, expiry: p}, true)
	return err
}

// expiring returns the expiring key name (ErrNotFound, ErrWrongType).
func (s *Store) expiring(name string) (*object, error) {
	if s.sets[name] != nil {
		return nil, ErrWrongType
	}
	o, kind := s.lookup(name)
	switch kind {
	case KindExpiring:
		return o, nil
	case KindNone:
		return nil, ErrNotFound
	}
	return nil, ErrWrongType
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
		o, err := s.expiring(name)
		if err != nil {
			return nil, err
		}
		o.mu.Lock()
		if o.dead {
			o.mu.Unlock()
			continue
		}
		added, pos, err := s.xadd(o, items, expiresAt)
		o.mu.Unlock()
		if err == nil {
			err = s.waitDurable(pos)
		}
		return added, err
	}
}

// xadd logs and applies an add under o.mu.
func (s *Store) xadd(o *object, items [][]byte, expiresAt time.Time) ([]bool, int64, error) {
	now := s.cfg.Now()
	switch ttl := expiresAt.Sub(now); {
	case now.Year() < 1800 || now.Year() > 2200:
		return nil, 0, &Error{Code: CodeClock, Msg: "server clock out of range: " + now.String()}
	case ttl < 0:
		return nil, 0, ErrExpiryPast
	case ttl > o.meta.expiry.MaxTTL:
		return nil, 0, ErrExpiryBeyondTTL
	}
	added := make([]bool, len(items))
	hashes := make([]uint64, len(items))
	for i, it := range items {
		hashes[i] = o.wf.Hash(it)
		added[i] = !o.wf.MayContainHash(hashes[i])
	}
	var pos int64
	if o.table == nil { // a table-backed set's record is the row
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
		if err := o.wf.AddHash(h, expiresAt); err != nil {
			s.remeasure(o)
			return nil, 0, &Error{Code: CodeFull, Msg: err.Error()}
		}
	}
	o.card.Add(uint64(len(hashes)))
	s.remeasure(o)
	return added, pos, nil
}

// replayXAdd re-applies a logged add under the current clock: an item whose
// expiry passed is not brought back. When the filter cannot hold an item
// (the clock stepped back past what G generations span), the key answers
// "present" to every lookup until the item's expiry rather than forget it,
// and says so in the log.
func (s *Store) replayXAdd(o *object, r *record) {
	exp := time.Unix(0, r.expiry)
	for _, h := range r.hashes {
		if err := o.wf.ReplayHash(h, exp); err != nil {
			if r.expiry > o.failOpenUntil.Load() {
				o.failOpenUntil.Store(r.expiry)
			}
			s.log.Error("replay: expiring key cannot hold an item; it answers present to every lookup until the item's expiry",
				"key", o.name, "until", exp, "err", err)
			return
		}
	}
	o.card.Add(uint64(len(r.hashes)))
}

// expiringMayContain answers lookups on the expiring key o; it never locks.
func (s *Store) expiringMayContain(o *object, items [][]byte, out []bool) {
	now := s.cfg.Now().UnixNano()
	if until := o.failOpenUntil.Load(); until != 0 && until >= now || o.table != nil && o.table.follow != nil && now > o.table.follow.freshUntil.Load() {
		for i := range out {
			out[i] = true
		}
		return
	}
	mayContainMany(o.wf.MayContain, items, out)
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

// expiringInfo describes the expiring key name, after dropping the
// generations that ended.
func (s *Store) expiringInfo(name string) (ExpiringInfo, error) {
	o, err := s.expiring(name)
	if err != nil {
		return ExpiringInfo{}, err
	}
	o.mu.Lock()
	if !o.dead {
		s.expireObject(o)
	}
	o.mu.Unlock()
	info := ExpiringInfo{
		Params:             o.meta.expiry,
		GenerationCapacity: o.wf.GenerationSizing().Capacity,
		Generations:        o.wf.Live(),
		Items:              o.wf.Items(),
		Size:               o.wf.Bytes(),
		MaxSize:            uint64(o.meta.expiry.Generations) * o.wf.GenerationSizing().Bytes(),
	}
	if ends := o.wf.GenerationEnds(); len(ends) > 0 {
		info.NextExpiry = ends[0]
	}
	return info, nil
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
		if o.kind == KindExpiring {
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

// expireObject drops o's ended generations and releases their memory. Call
// with o.mu held. Nothing is logged: which generations ended follows from
// the clock, and replay re-derives it.
func (s *Store) expireObject(o *object) int {
	n, err := o.wf.Expire()
	if err != nil || n == 0 {
		return 0
	}
	o.dump = nil
	s.remeasure(o)
	return n
}
