package bloomgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/bloomgate/bloomgate/filter"
)

// Sentinel errors.
var (
	// ErrInvalidConfig reports a Config that New cannot use.
	ErrInvalidConfig = errors.New("bloomgate: invalid config")
	// ErrKeyTooLong reports a key longer than Config.MaxKeyLen.
	ErrKeyTooLong = errors.New("bloomgate: key too long")
	// ErrRemoveUnsupported reports a Remove the filter kind cannot apply. The
	// gate stays correct (the key only costs a false positive) and counts it
	// toward the rebuild trigger.
	ErrRemoveUnsupported = errors.New("bloomgate: filter cannot remove keys")
	// ErrClosed reports use of a closed Gate.
	ErrClosed = errors.New("bloomgate: closed")
)

// State is the gate's state. Only in StateReady and StateRebuilding does the
// filter answer "absent"; in the others every lookup goes to the database.
type State int32

const (
	// StateWarming: no filter has been built yet.
	StateWarming State = iota
	// StateReady: the filter is authoritative.
	StateReady
	// StateRebuilding: a fresh filter is being built while the current one,
	// still complete and authoritative, keeps serving.
	StateRebuilding
	// StateDegraded: the gate cannot be sure of its filter (a build failed
	// with nothing to fall back on, the filter refused a key, or the
	// application called Degrade); Reason says why.
	StateDegraded
)

func (s State) String() string {
	switch s {
	case StateWarming:
		return "warming"
	case StateReady:
		return "ready"
	case StateRebuilding:
		return "rebuilding"
	case StateDegraded:
		return "degraded"
	}
	return fmt.Sprintf("state(%d)", int32(s))
}

// Config configures a Gate. The zero value of every field but Source means
// its default.
type Config struct {
	// Source streams the table's keys. Required.
	Source Source
	// Capacity is the number of keys each built filter is sized for.
	// Default: 1.5 × Source.Estimate at build time (at least 1024), so the
	// table can grow by half before the overfill trigger fires.
	Capacity uint64
	// FPRate is the target false-positive rate. Default: 0.001.
	FPRate float64
	// NewFilter builds an empty filter. Default: a blocked filter.Bloom.
	// Filters that implement filter.Remover let Remove take effect at once.
	NewFilter func(capacity uint64, fpRate float64) (filter.Filter, error)
	// Normalizer maps keys before they reach the filter, on every path.
	// Default: Exact.
	Normalizer Normalizer
	// MaxKeyLen is the longest key (after normalisation) the filter holds.
	// Longer keys are skipped at build time, rejected by Add, and always
	// reported "maybe present", so they are looked up in the database.
	// Default: 4096.
	MaxKeyLen int
	// Logger receives build and state-change events. Default: discard.
	Logger *slog.Logger
	// Registerer, if set, receives the gate's Prometheus metrics.
	Registerer prometheus.Registerer
	// RebuildInterval rebuilds the filter from the source this often (the
	// articles' nightly job). Default: 0, never on a schedule.
	RebuildInterval time.Duration
	// CheckInterval is how often Run checks the rebuild triggers.
	// Default: 15 s.
	CheckInterval time.Duration
	// OverfillFactor triggers a rebuild when the filter's estimated
	// false-positive rate exceeds FPRate × OverfillFactor. Default: 2.
	OverfillFactor float64
	// RemoveRebuildRatio triggers a rebuild when removes the filter could not
	// honour exceed this fraction of its items. Default: 0.01.
	RemoveRebuildRatio float64
	// RebuildOverlap is how far back a build replays recent adds into the new
	// filter, to cover transactions that called Add before their row was
	// visible to the build's snapshot. It must exceed your longest
	// transaction. Default: 1 minute.
	RebuildOverlap time.Duration
	// OnProgress is called about every 65536 keys during a build, and once
	// with Done set at its end. It must not block.
	OnProgress func(Progress)
	// Now is the clock. Default: time.Now.
	Now func() time.Time
}

func (c *Config) fill() error {
	if c.Source == nil {
		return fmt.Errorf("%w: Source is required", ErrInvalidConfig)
	}
	if c.FPRate == 0 {
		c.FPRate = 0.001
	}
	if !(c.FPRate > 0 && c.FPRate < 1) {
		return fmt.Errorf("%w: FPRate %v outside (0, 1)", ErrInvalidConfig, c.FPRate)
	}
	if c.NewFilter == nil {
		c.NewFilter = func(n uint64, p float64) (filter.Filter, error) {
			return filter.NewBloom(filter.BloomConfig{Capacity: n, FPRate: p})
		}
	}
	if c.MaxKeyLen == 0 {
		c.MaxKeyLen = 4096
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.CheckInterval == 0 {
		c.CheckInterval = 15 * time.Second
	}
	if c.OverfillFactor == 0 {
		c.OverfillFactor = 2
	}
	if c.RemoveRebuildRatio == 0 {
		c.RemoveRebuildRatio = 0.01
	}
	if c.RebuildOverlap == 0 {
		c.RebuildOverlap = time.Minute
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case c.MaxKeyLen < 0, c.RebuildInterval < 0, c.CheckInterval < 0, c.RebuildOverlap < 0:
		return fmt.Errorf("%w: negative MaxKeyLen or interval", ErrInvalidConfig)
	case c.OverfillFactor < 1:
		return fmt.Errorf("%w: OverfillFactor %v < 1", ErrInvalidConfig, c.OverfillFactor)
	case c.RemoveRebuildRatio < 0:
		return fmt.Errorf("%w: negative RemoveRebuildRatio", ErrInvalidConfig)
	}
	if _, err := filter.SizeBloom(1024, c.FPRate); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// hashLookup is the capability the gate uses to hash a key once, on the stack,
// without handing the slice to an interface (which would allocate).
type hashLookup interface {
	Seed() uint64
	MayContainHash(h uint64) bool
}

// view is what readers see, published atomically as one unit.
type view struct {
	state   State
	reason  string
	f       filter.Filter // nil while warming
	hl      hashLookup    // f's hash capability, if any
	seed    uint64
	builtAt time.Time
}

type journalEntry struct {
	at  time.Time
	key []byte
}

// Gate answers "definitely absent" for keys its filter has never seen, and
// sends everything else to the database.
//
// A Gate is safe for concurrent use. MayContain and Lookup never lock; Add,
// Remove and builds serialise on a mutex. Lock order: buildMu, then mu.
type Gate struct {
	cfg  Config
	view atomic.Pointer[view]
	sf   singleflight.Group
	m    *metrics

	buildMu sync.Mutex // one build at a time

	mu         sync.Mutex // guards the fields below; readers never take it
	pending    filter.Filter
	pendingErr error
	journal    []journalEntry
	unhonoured uint64 // removes the serving filter could not apply
	closed     bool
}

// New returns a gate in StateWarming. Call Warm or Run to build its filter;
// until then every lookup goes to the database.
func New(cfg Config) (*Gate, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	g := &Gate{cfg: cfg}
	g.view.Store(&view{state: StateWarming, reason: "not warmed yet"})
	g.m = newMetrics(g)
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(g.m); err != nil {
			return nil, fmt.Errorf("bloomgate: registering metrics: %w", err)
		}
	}
	return g, nil
}

// State returns the current state and, outside StateReady, the reason.
func (g *Gate) State() (State, string) {
	v := g.view.Load()
	return v.state, v.reason
}

// Ready reports whether the filter is authoritative (for readiness probes).
func (g *Gate) Ready() bool {
	s := g.view.Load().state
	return s == StateReady || s == StateRebuilding
}

// MayContain reports false only if key is definitely not in the table. It
// never blocks and does not allocate (built-in normalisers, keys ≤ 256 bytes).
func (g *Gate) MayContain(key []byte) bool {
	present, _ := g.mayContain(key)
	return present
}

// MayContainString is MayContain for a string key.
func (g *Gate) MayContainString(key string) bool {
	present, _ := g.mayContain(stringBytes(key))
	return present
}

// mayContain also reports whether the answer came from an authoritative
// filter (false: failed open).
func (g *Gate) mayContain(key []byte) (present, authoritative bool) {
	v := g.view.Load()
	if v.state != StateReady && v.state != StateRebuilding {
		g.m.failOpen[v.state].Add(1)
		return true, false
	}
	switch n := g.cfg.Normalizer; {
	case n.fn != nil:
		return g.lookupNormalized(v, n.fn(nil, key))
	case n.kind == 0: // Exact: no copy
		return g.lookupNormalized(v, key)
	}
	var buf [256]byte
	return g.lookupNormalized(v, g.cfg.Normalizer.appendBuiltin(buf[:0], key))
}

func (g *Gate) lookupNormalized(v *view, nk []byte) (present, authoritative bool) {
	if len(nk) > g.cfg.MaxKeyLen {
		g.m.failOpenLong.Add(1)
		return true, false
	}
	if v.hl != nil {
		h := filter.Hash(nk, v.seed)
		present = v.hl.MayContainHash(h)
		g.m.lookups.add(h, present)
	} else {
		// Filters without the hash capability get a copy: handing the
		// caller's stack buffer to an interface would move it to the heap
		// on every path.
		present = v.f.MayContain(bytes.Clone(nk))
		g.m.lookups.add(uint64(len(nk)), present)
	}
	return present, true
}

// Add records a new key (the articles' on_user_created). Call it before the
// row's transaction commits: from then on no lookup can miss the row. A key
// whose transaction rolls back only costs a false positive until the next
// rebuild.
//
// If the filter refuses the key (a full cuckoo filter, say), Add returns the
// error and the gate turns degraded — failing open — until a rebuild.
func (g *Gate) Add(key []byte) error {
	var buf [256]byte
	nk := g.cfg.Normalizer.Append(buf[:0], key)
	if len(nk) > g.cfg.MaxKeyLen {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrKeyTooLong, len(nk), g.cfg.MaxKeyLen)
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.appendJournal(now, nk)
	if g.pending != nil && g.pendingErr == nil {
		if err := g.pending.Add(nk); err != nil {
			g.pendingErr = err
		}
	}
	if v := g.view.Load(); v.f != nil {
		if err := v.f.Add(nk); err != nil {
			g.setStateLocked(StateDegraded, fmt.Sprintf("filter refused a key: %v", err))
			return fmt.Errorf("bloomgate: add: %w", err)
		}
	}
	g.m.adds.Add(1)
	return nil
}

// AddString is Add for a string key.
func (g *Gate) AddString(key string) error { return g.Add(stringBytes(key)) }

// Remove records that key's row was deleted. Call it after the delete
// commits. With a filter that implements filter.Remover the key is removed at
// once; otherwise Remove returns ErrRemoveUnsupported, the key keeps costing a
// false positive, and enough of them trigger a rebuild. Removing a key that
// was never added is the caller's error: with a counting or cuckoo filter it
// can remove another key's trace.
//
// A remove during a build is not applied to the filter being built (whose
// snapshot may not have reached the key yet); the key is at worst a false
// positive until the next build.
func (g *Gate) Remove(key []byte) error {
	var buf [256]byte
	nk := g.cfg.Normalizer.Append(buf[:0], key)
	if len(nk) > g.cfg.MaxKeyLen {
		return nil // never in the filter
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	g.m.removes.Add(1)
	v := g.view.Load()
	if v.f == nil {
		return nil
	}
	if r, ok := v.f.(filter.Remover); ok {
		if err := r.Remove(nk); err != nil {
			g.m.removeMisses.Add(1)
			return fmt.Errorf("bloomgate: remove: %w", err)
		}
		return nil
	}
	g.unhonoured++
	return ErrRemoveUnsupported
}

// RemoveString is Remove for a string key.
func (g *Gate) RemoveString(key string) error { return g.Remove(stringBytes(key)) }

// Degrade makes the gate fail open (every lookup goes to the database) until
// the next successful build, for reasons only the application can see (a lost
// change feed, say). Run rebuilds a degraded gate.
func (g *Gate) Degrade(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setStateLocked(StateDegraded, reason)
}

// setStateLocked publishes a new view with the same filter. g.mu is held.
func (g *Gate) setStateLocked(s State, reason string) {
	old := g.view.Load()
	nv := *old
	nv.state, nv.reason = s, reason
	if s == StateReady {
		nv.reason = ""
	}
	g.view.Store(&nv)
	if old.state != s {
		g.cfg.Logger.Info("bloomgate: state change", "from", old.state, "to", s, "reason", reason)
	}
}

func (g *Gate) appendJournal(now time.Time, nk []byte) {
	cut := 0
	for cut < len(g.journal) && now.Sub(g.journal[cut].at) > g.cfg.RebuildOverlap {
		cut++
	}
	if cut > 0 {
		g.journal = append(g.journal[:0], g.journal[cut:]...)
	}
	g.journal = append(g.journal, journalEntry{at: now, key: append([]byte(nil), nk...)})
}

// Close unregisters the metrics and makes further Add and Remove fail. Reads
// keep answering from the last filter. Close is idempotent.
func (g *Gate) Close() error {
	g.mu.Lock()
	was := g.closed
	g.closed = true
	g.mu.Unlock() // Unregister collects, which takes g.mu
	if !was && g.cfg.Registerer != nil {
		g.cfg.Registerer.Unregister(g.m)
	}
	return nil
}

// Stats is a snapshot of the gate's counters and its filter.
type Stats struct {
	State  State
	Reason string
	// Lookups answered from the filter, and how many of them were "absent".
	Lookups, Absent uint64
	// FailOpen counts lookups sent to the database because the gate was
	// not ready or the key was too long.
	FailOpen uint64
	// Fetches counts database fetches made by Lookup (after coalescing);
	// EmptyFetches those after a "maybe" that found nothing: false
	// positives, observed.
	Fetches, EmptyFetches uint64
	// ObservedFPRate is EmptyFetches / (Absent + EmptyFetches): the share of
	// absent keys the filter let through.
	ObservedFPRate float64
	// ConfiguredFPRate is Config.FPRate.
	ConfiguredFPRate float64
	// UnhonouredRemoves counts removes the filter could not apply since the
	// last build.
	UnhonouredRemoves uint64
	// Builds counts successful warm-ups and rebuilds.
	Builds uint64
	// Filter describes the serving filter (zero while warming).
	Filter filter.Stats
}

// Stats returns the gate's counters. It reads the whole filter (O(size)).
func (g *Gate) Stats() Stats {
	v := g.view.Load()
	s := Stats{State: v.state, Reason: v.reason, ConfiguredFPRate: g.cfg.FPRate}
	s.Lookups, s.Absent = g.m.lookups.sum()
	s.FailOpen = g.m.failOpenLong.Load()
	for i := range g.m.failOpen {
		s.FailOpen += g.m.failOpen[i].Load()
	}
	s.Fetches, s.EmptyFetches = g.m.fetches.Load(), g.m.emptyFetches.Load()
	if d := s.Absent + s.EmptyFetches; d > 0 {
		s.ObservedFPRate = float64(s.EmptyFetches) / float64(d)
	}
	s.Builds = g.m.builds.Load()
	g.mu.Lock()
	s.UnhonouredRemoves = g.unhonoured
	g.mu.Unlock()
	if v.f != nil {
		s.Filter = v.f.Stats()
	}
	return s
}

// Lookup is the read-through path: it returns (zero, false, nil) at once when
// the gate proves key absent, and otherwise calls fetch, which returns the
// value and whether a row was found. Concurrent Lookups of the same
// (normalised) key share one fetch; the shared fetch runs with the context of
// the caller that started it. A fetch that finds nothing after a "maybe"
// counts as an observed false positive.
func Lookup[V any](ctx context.Context, g *Gate, key string, fetch func(ctx context.Context) (V, bool, error)) (V, bool, error) {
	var zero V
	present, authoritative := g.mayContain(stringBytes(key))
	if !present {
		return zero, false, nil
	}
	nk := string(g.cfg.Normalizer.Append(nil, stringBytes(key)))
	res, err, _ := g.sf.Do(nk, func() (any, error) {
		g.m.fetches.Add(1)
		v, found, err := fetch(ctx)
		return fetchResult[V]{v, found}, err
	})
	if err != nil {
		return zero, false, err
	}
	r := res.(fetchResult[V])
	if !r.found && authoritative {
		g.m.emptyFetches.Add(1)
	}
	return r.v, r.found, nil
}

type fetchResult[V any] struct {
	v     V
	found bool
}
