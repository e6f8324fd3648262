package bloomgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/defaults"
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
	// ErrRemoveDeferred reports a Remove the gate did not apply because the
	// serving filter's build started less than Config.RebuildOverlap before
	// it: its snapshot may never have held the key, and removing it could
	// remove another key's trace. The key costs a false positive until the
	// next build, and counts toward the rebuild trigger.
	ErrRemoveDeferred = errors.New("bloomgate: remove deferred to the next build")
	// ErrFollowing reports Warm, Rebuild or Run on a gate that follows a
	// change feed: Follow builds its filters itself.
	ErrFollowing = errors.New("bloomgate: the gate follows a change feed")
	// ErrBuilding reports a build started while another one runs.
	ErrBuilding = errors.New("bloomgate: a build is in progress")
	// ErrClosed reports use of a closed Gate. It is changefeed.ErrClosed.
	ErrClosed = changefeed.ErrClosed
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
	// application called Degrade); the reason says why.
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

// Config configures a Gate. The zero value of every field means its
// default.
type Config struct {
	// Source streams the table's keys. Required for Warm, Rebuild and Run;
	// a gate that only follows a change feed (Follow) may leave it nil.
	Source Source
	// Capacity is the number of keys each built filter is sized for.
	// Default: (1 + Headroom) × the source's estimate at build time (at
	// least 1024, and never less than the serving filter holds).
	Capacity uint64
	// Headroom is the growth a filter sized from the source's estimate is
	// built for: at 0.25 the table can grow by a quarter before the filter
	// reaches FPRate, and further until the overfill trigger rebuilds it.
	// Memory grows with it: at the default FPRate a Bloom filter takes about
	// 15.6 × (1 + Headroom) bits per key. Ignored when Capacity is set.
	// Default: 0.25.
	Headroom float64
	// FPRate is the target false-positive rate. Default: filter.DefaultFPRate
	// (0.1 %), the default of every filter constructor.
	FPRate float64
	// NewFilter builds an empty filter for capacity keys at fpRate whose
	// hash uses seed. Default: NewBloom. NewCuckoo and NewCounting build
	// filters whose removes the gate applies.
	NewFilter func(capacity uint64, fpRate float64, seed uint64) (Filter, error)
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
	// RebuildInterval rebuilds the filter from the source this often (a
	// nightly job, say). Default: 0, never on a schedule.
	RebuildInterval time.Duration
	// CheckInterval is how often Run checks the rebuild triggers.
	// Default: 15 s.
	CheckInterval time.Duration
	// OverfillFactor triggers a rebuild when the filter's estimated
	// false-positive rate exceeds FPRate × OverfillFactor. Default: 2.
	OverfillFactor float64
	// RemoveRebuildRatio triggers a rebuild when removes the filter did not
	// apply exceed this fraction of its items. Default: 0.01.
	RemoveRebuildRatio float64
	// RebuildOverlap bounds the time between a row's Add and its commit, and
	// between a row's delete commit and its Remove: it must exceed your
	// longest transaction and your slowest Remove. A build replays the adds
	// of the last RebuildOverlap into its new filter, and a Remove less than
	// RebuildOverlap after the serving filter's build started is not applied
	// (ErrRemoveDeferred). Default: 1 minute.
	RebuildOverlap time.Duration
	// OnProgress is called about every 65536 keys during a build, and once
	// with Done set at its end. It must not block.
	OnProgress func(Progress)
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// Audit, if set, is the self-audit: it reports whether the table holds
	// a row with the (normalised) key, like a confirm query. In the
	// background the gate offers it a sample of the "absent" answers of
	// single-key lookups (MayContain, MayContainString, Lookup), at
	// most AuditPerSecond a second (lookups never wait for it). A row found
	// that the filter still answers absent for is a false negative: it is
	// counted (Stats.AuditFalseNegatives), its key's hash is logged, and the
	// gate fails open until a build succeeds. Default: nil, no audit.
	Audit func(ctx context.Context, key []byte) (bool, error)
	// AuditPerSecond bounds the audit's queries. Default: 1.
	AuditPerSecond float64
}

// Defaults of Config's fields.
const (
	DefaultFPRate             = filter.DefaultFPRate
	DefaultHeadroom           = 0.25
	DefaultMaxKeyLen          = 4096
	DefaultCheckInterval      = 15 * time.Second
	DefaultOverfillFactor     = 2
	DefaultRemoveRebuildRatio = 0.01
	DefaultRebuildOverlap     = time.Minute
)

func (c *Config) fill() error {
	defaults.Set(&c.FPRate, DefaultFPRate)
	defaults.Set(&c.Headroom, DefaultHeadroom)
	defaults.Set(&c.MaxKeyLen, DefaultMaxKeyLen)
	defaults.Set(&c.CheckInterval, DefaultCheckInterval)
	defaults.Set(&c.OverfillFactor, DefaultOverfillFactor)
	defaults.Set(&c.RemoveRebuildRatio, DefaultRemoveRebuildRatio)
	defaults.Set(&c.RebuildOverlap, DefaultRebuildOverlap)
	defaults.Set(&c.AuditPerSecond, 1)
	if c.NewFilter == nil {
		c.NewFilter = NewBloom
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	switch {
	case !(c.FPRate > 0 && c.FPRate < 1):
		return fmt.Errorf("%w: FPRate %v outside (0, 1)", ErrInvalidConfig, c.FPRate)
	case c.MaxKeyLen < 0, c.RebuildInterval < 0, c.CheckInterval < 0, c.RebuildOverlap < 0:
		return fmt.Errorf("%w: negative MaxKeyLen or interval", ErrInvalidConfig)
	case !(c.Headroom >= 0):
		return fmt.Errorf("%w: Headroom %v < 0", ErrInvalidConfig, c.Headroom)
	case !(c.OverfillFactor >= 1):
		return fmt.Errorf("%w: OverfillFactor %v < 1", ErrInvalidConfig, c.OverfillFactor)
	case !(c.RemoveRebuildRatio >= 0):
		return fmt.Errorf("%w: negative RemoveRebuildRatio", ErrInvalidConfig)
	case !(c.AuditPerSecond > 0) || c.AuditPerSecond > 1e6:
		return fmt.Errorf("%w: AuditPerSecond %v outside (0, 1e6]", ErrInvalidConfig, c.AuditPerSecond)
	}
	if _, err := filter.SizeBloom(1024, c.FPRate); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidConfig, err)
	}
	return nil
}

// view is what readers see, published atomically as one unit.
type view struct {
	state  State
	reason string
	f      Filter        // nil while warming
	bloom  *filter.Bloom // f, if it is a Bloom: looked up without an interface call
	// ready: authoritative and not followed, so answers(v) holds without
	// reading the clock; fast: bloom when ready and the gate's normaliser is
	// Exact, the lookup's fast path. Both set by publishLocked.
	ready bool
	fast  *filter.Bloom
	rm    Remover // f, if it can remove
	seed  uint64  // f's hash seed
	// followed: a change feed keeps f in step (Follow), so f answers only
	// while the feed's lag was checked recently enough (Gate.freshUntil).
	followed bool
	// owner says whose reason a StateDegraded is: only the change feed's
	// follower clears the ones it owns.
	owner degradeOwner
	// snapshotAt is when f's build installed it: rows committed later
	// reached f through Add, rows deleted earlier may be missing from it.
	snapshotAt time.Time
	builtAt    time.Time
	gen        uint64 // f's generation (Stats.Generation)
}

// degradeOwner says who made the gate fail open, and so who may end it.
type degradeOwner uint8

const (
	// ownerNone: the gate itself or the application (Degrade); a build
	// ends it.
	ownerNone degradeOwner = iota
	// ownerFeed: Follow, for the feed's lag or failure; Follow ends it once
	// the feed is fresh again.
	ownerFeed
)

// Gate answers "definitely absent" for keys its filter has never seen, and
// sends everything else to the database.
//
// A Gate is safe for concurrent use. MayContain and Lookup never lock; Add,
// Remove and the start and end of a build serialise on a mutex. Lock order:
// buildMu, then the change feed follower's mutex (see follower), then mu.
type Gate struct {
	cfg  Config
	view atomic.Pointer[view]
	sf   singleflight.Group
	m    *metrics
	// freshUntil is when the applied feed position stops being within
	// MaxLag of the feed's head, as last checked (see clock).
	freshUntil atomic.Int64
	// epoch anchors clock: Config.Now at New.
	epoch time.Time
	// feedErr is the error that last ended a run of Follow.
	feedErr atomic.Pointer[feedFailure]
	// posChanged is closed, and cleared, when the applied feed position
	// next changes (PositionChanged); nil while nobody waits.
	posChanged atomic.Pointer[chan struct{}]

	buildMu sync.Mutex // one build at a time

	mu         sync.Mutex // guards the fields below; readers never take it
	building   bool       // a build is in progress (its filter is not serving yet)
	built      Filter     // that build's filter
	pending    Filter     // the filter a build fills with concurrent adds, if any
	pendingErr error      // the first add pending refused
	// buffering: the build fills its filter from one goroutine with plain
	// writes (filter.BloomBuilder), so concurrent adds wait in pendingBuf
	// and reach the filter when the build finishes.
	buffering  bool
	pendingBuf []uint64
	journal    journal
	// seed is the hash seed of every filter the gate builds. It changes only
	// when a snapshot with another seed is loaded, with buildMu held too.
	seed      uint64
	unapplied uint64 // removes the serving filter did not apply
	// pendingUnapplied counts removes since the pending filter was
	// installed: none of them reached it.
	pendingUnapplied uint64
	following        bool // a change feed applies deletes (Follow)
	closed           bool
	changed          chan struct{} // closed at the next view change (WaitReady), if not nil

	auditCh   chan []byte   // sampled "absent" answers, nil without Config.Audit
	auditStop chan struct{} // closed by Close
	closing   chan struct{} // closed by Close: ends a running Follow
}

// New returns a gate in StateWarming. Call Warm or Run to build its filter;
// until then every lookup goes to the database.
func New(cfg Config) (*Gate, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	g := &Gate{cfg: cfg, seed: rand.Uint64(), journal: newJournal(cfg.RebuildOverlap), m: &metrics{lookups: newLookupCounts()}, epoch: cfg.Now()}
	g.view.Store(&view{state: StateWarming, reason: "not warmed yet"})
	g.closing = make(chan struct{})
	if cfg.Audit != nil {
		g.auditCh, g.auditStop = make(chan []byte, 16), make(chan struct{})
		go g.audit(g.auditCh, g.auditStop)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(g.collector()); err != nil {
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
func (g *Gate) Ready() bool { return g.answers(g.view.Load()) }

func (v *view) authoritative() bool { return v.state == StateReady || v.state == StateRebuilding }

// answers reports whether v's filter may answer "absent" now: v is
// authoritative and, while a feed keeps it in step, the feed's lag was last
// found within MaxLag recently enough. A process paused past MaxLag (SIGSTOP,
// a long GC or VM stall) thus fails open from its first lookup after
// resuming, before its lag checker runs again.
func (g *Gate) answers(v *view) bool {
	return v.authoritative() && (!v.followed || g.clock() <= g.freshUntil.Load())
}

// clock is Config.Now as nanoseconds since New: the one clock of the lag
// check and of readers. With time.Now it is monotonic, so a process paused
// past MaxLag finds itself stale on waking.
func (g *Gate) clock() int64 { return int64(g.cfg.Now().Sub(g.epoch)) }

// failOpen counts a lookup sent to the database because v cannot answer.
func (g *Gate) failOpen(v *view, n uint64) {
	st := v.state
	if v.authoritative() { // stale: a followed filter past MaxLag
		st = StateDegraded
	}
	g.m.failOpen[st].Add(n)
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
// filter (false: failed open). On the fast path (a ready Bloom filter, the
// Exact normaliser) it costs what the filter's own MayContain costs plus a
// pointer load, a length check and a per-P counter (counts.go).
func (g *Gate) mayContain(key []byte) (present, authoritative bool) {
	v := g.view.Load()
	if b := v.fast; b != nil && len(key) <= g.cfg.MaxKeyLen {
		present = b.MayContain(key) // hashes like filter.Hash(key, v.seed)
		if n := g.m.lookups.add(present); !present && g.auditCh != nil && n%auditEvery == 0 {
			g.offerAudit(key)
		}
		return present, true
	}
	return g.mayContainSlow(v, key)
}

// mayContainSlow is mayContain off the fast path: a gate that is not ready
// or follows a feed, another filter kind, a normaliser that rewrites keys, a
// key over MaxKeyLen.
func (g *Gate) mayContainSlow(v *view, key []byte) (present, authoritative bool) {
	if !g.answers(v) {
		g.failOpen(v, 1)
		return true, false
	}
	var buf [256]byte
	nk, ok := g.cfg.Normalizer.normalize(&buf, key, g.cfg.MaxKeyLen)
	if !ok {
		g.m.failOpenLong.Add(1)
		return true, false
	}
	present = v.f.MayContainHash(filter.Hash(nk, v.seed))
	if n := g.m.lookups.add(present); !present && g.auditCh != nil && n%auditEvery == 0 {
		g.offerAudit(nk)
	}
	return present, true
}

// offerAudit hands a copy of an "absent" key to the self-audit, unless it is
// busy.
func (g *Gate) offerAudit(nk []byte) {
	select {
	case g.auditCh <- append([]byte(nil), nk...):
	default:
	}
}

// hash normalises key and hashes it with seed.
func (g *Gate) hash(key []byte, seed uint64) (uint64, error) {
	var buf [256]byte
	nk, ok := g.cfg.Normalizer.normalize(&buf, key, g.cfg.MaxKeyLen)
	if !ok {
		return 0, fmt.Errorf("%w: %d bytes (limit %d)", ErrKeyTooLong, len(nk), g.cfg.MaxKeyLen)
	}
	return filter.Hash(nk, seed), nil
}

// Add records a new key. Call it before the row's transaction commits: from
// then on no lookup can miss the row, and a build that starts before the
// commit replays the add as long as the commit comes within RebuildOverlap. A
// key whose transaction rolls back only costs a false positive until the next
// build.
//
// If the filter refuses the key (a full cuckoo filter, say), Add returns the
// error and the gate turns degraded — failing open — until a build succeeds.
// Add holds the gate's mutex for O(1) amortised work.
func (g *Gate) Add(key []byte) error {
	var buf [256]byte
	nk, ok := g.cfg.Normalizer.normalize(&buf, key, g.cfg.MaxKeyLen)
	if !ok {
		return fmt.Errorf("%w: %d bytes (limit %d)", ErrKeyTooLong, len(nk), g.cfg.MaxKeyLen)
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	h := filter.Hash(nk, g.seed)
	g.journal.add(now, h)
	switch {
	case g.pending != nil && g.pendingErr == nil:
		g.pendingErr = g.pending.AddHash(h)
	case g.buffering:
		g.pendingBuf = append(g.pendingBuf, h)
	}
	if v := g.view.Load(); v.f != nil {
		if err := v.f.AddHash(h); err != nil {
			g.setStateLocked(StateDegraded, fmt.Sprintf("filter refused a key: %v", err))
			return fmt.Errorf("bloomgate: add: %w", err)
		}
	}
	g.m.adds.Add(1)
	return nil
}

// AddString is Add for a string key.
func (g *Gate) AddString(key string) error { return g.Add(stringBytes(key)) }

// Remove records that key's row was deleted. While the gate follows a change
// feed (Follow), Remove does nothing and returns nil: the feed applies every
// delete, exactly once. Otherwise call it once per deleted row,
// after the delete commits and within RebuildOverlap of the commit, and only
// for rows whose key was in the table or added with Add; removing a key the
// gate never saw can make another key a false negative with a counting or
// cuckoo filter.
//
// Remove deletes the key from the serving filter only when that is safe: the
// filter implements Remover and its build started at least RebuildOverlap
// ago, so its snapshot held the row. Otherwise it returns
// ErrRemoveUnsupported (the filter cannot remove) or ErrRemoveDeferred (the
// snapshot may not have held the row): the key then costs a false positive
// until the next build, and enough such removes trigger one. A filter being
// built never receives removes. A Remove the filter rejects (the key is not
// in it) returns the filter's error, counted as a remove miss.
func (g *Gate) Remove(key []byte) error {
	var buf [256]byte
	nk, ok := g.cfg.Normalizer.normalize(&buf, key, g.cfg.MaxKeyLen)
	if !ok {
		return nil // never in the filter
	}
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return ErrClosed
	}
	if g.following {
		return nil // the change feed applies the delete
	}
	h := filter.Hash(nk, g.seed)
	g.m.removes.Add(1)
	if g.building {
		g.pendingUnapplied++
	}
	v := g.view.Load()
	switch {
	case v.f == nil:
		return nil
	case v.rm == nil:
		g.unapplied++
		return ErrRemoveUnsupported
	case now.Sub(v.snapshotAt) < g.cfg.RebuildOverlap:
		g.unapplied++
		return ErrRemoveDeferred
	}
	if err := v.rm.RemoveHash(h); err != nil {
		g.m.removeMisses.Add(1)
		return fmt.Errorf("bloomgate: remove: %w", err)
	}
	return nil
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
func (g *Gate) setStateLocked(s State, reason string) { g.setOwnedStateLocked(s, ownerNone, reason) }

// setOwnedStateLocked is setStateLocked for a state owned by owner.
func (g *Gate) setOwnedStateLocked(s State, owner degradeOwner, reason string) {
	nv := *g.view.Load()
	nv.state, nv.owner, nv.reason = s, owner, reason
	g.publishLocked(&nv)
}

// publishLocked makes nv the view readers see and logs a state change.
// g.mu is held.
func (g *Gate) publishLocked(nv *view) {
	if nv.state == StateReady {
		nv.reason = ""
	}
	nv.bloom, _ = nv.f.(*filter.Bloom)
	nv.ready = nv.authoritative() && !nv.followed && nv.f != nil
	nv.fast = nil
	if nv.ready && g.cfg.Normalizer.kind == normExact {
		nv.fast = nv.bloom
	}
	old := g.view.Swap(nv)
	if g.changed != nil {
		close(g.changed)
		g.changed = nil
	}
	if old.state != nv.state {
		g.cfg.Logger.Info("bloomgate: state change", "from", old.state, "to", nv.state, "reason", nv.reason)
	}
}

// noteSwapLocked counts a filter that replaced a serving one. g.mu is held.
func (g *Gate) noteSwapLocked() {
	g.m.swaps.Add(1)
	g.m.lastSwap.Store(g.cfg.Now().UnixNano())
}

// Close unregisters the metrics, makes further Add and Remove fail with
// ErrClosed, and ends a running Follow, which returns ErrClosed. From then on every lookup fails open ("maybe present"): a row an
// application still inserts cannot reach the filter. Close is idempotent.
func (g *Gate) Close() error {
	g.mu.Lock()
	was := g.closed
	g.closed = true
	g.setStateLocked(StateDegraded, "closed")
	if !was {
		close(g.closing)
		if g.auditStop != nil {
			close(g.auditStop)
		}
	}
	g.mu.Unlock() // Unregister collects, which takes g.mu
	if !was && g.cfg.Registerer != nil {
		g.cfg.Registerer.Unregister(g.collector())
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
	// Fetches counts database fetches made by Lookup, after coalescing:
	// concurrent Lookups of one key share one fetch and count once.
	// EmptyFetches counts those that followed an authoritative "maybe" and
	// found no row: false positives, observed (also counted once per
	// shared fetch).
	Fetches, EmptyFetches uint64
	// ObservedFPRate is EmptyFetches / (Absent + EmptyFetches): the share of
	// absent keys the filter let through.
	ObservedFPRate float64
	// ConfiguredFPRate is Config.FPRate.
	ConfiguredFPRate float64
	// UnappliedRemoves counts removes the serving filter did not apply
	// (ErrRemoveUnsupported, ErrRemoveDeferred, or made during its build).
	UnappliedRemoves uint64
	// JournalAdds is the number of recent adds a build would replay.
	JournalAdds int
	// Builds counts successful warm-ups, rebuilds and bootstraps.
	Builds uint64
	// FeedPosition is the change-feed position applied, FeedLag how far it
	// is behind the feed's head, and Snapshots the snapshots written, while
	// the gate follows a feed (Follow).
	FeedPosition uint64
	FeedLag      time.Duration
	Snapshots    uint64
	// FeedErrors counts the feed failures that made Follow fail open and
	// restart (bloomgate_feed_errors_total, summed over causes).
	FeedErrors uint64
	// AuditSamples counts "absent" answers the self-audit checked against
	// the table (Config.Audit), AuditFalseNegatives those it found a row
	// for: 0 of AuditSamples is the figure a dashboard shows.
	AuditSamples, AuditFalseNegatives uint64
	// Generation numbers the serving filter: for a gate that builds its
	// own filters, the count of builds in this process when it was
	// published (0 for a filter loaded from a snapshot); for a fan-out
	// instance, the feeder's generation of the filter it serves.
	// Swaps counts the filters that replaced a serving one without failing
	// open (a rebuild's, a newer generation's), and LastSwap is when the
	// last of them did (zero: none yet).
	Generation, Swaps uint64
	LastSwap          time.Time
	// Filter describes the serving filter (zero while warming).
	Filter filter.Stats
}

// Stats returns the gate's counters and the serving filter's description.
// It reads the whole filter (O(size)); Counters does not.
func (g *Gate) Stats() Stats {
	v := g.view.Load()
	s := g.counters(v)
	if v.f != nil {
		s.Filter = v.f.Stats()
	}
	return s
}

// Counters returns Stats without Filter (left zero), in constant time: for
// readiness probes and status lines polled often, which a pass over a large
// filter would make cost milliseconds each.
func (g *Gate) Counters() Stats { return g.counters(g.view.Load()) }

func (g *Gate) counters(v *view) Stats {
	s := Stats{State: v.state, Reason: v.reason, ConfiguredFPRate: g.cfg.FPRate}
	s.Lookups, s.Absent = g.m.lookups.sum()
	s.FailOpen = g.m.failOpenTotal()
	s.Fetches, s.EmptyFetches = g.m.fetches.Load(), g.m.emptyFetches.Load()
	if d := s.Absent + s.EmptyFetches; d > 0 {
		s.ObservedFPRate = float64(s.EmptyFetches) / float64(d)
	}
	s.Builds = g.m.builds.Load()
	s.Generation, s.Swaps = v.gen, g.m.swaps.Load()
	if ns := g.m.lastSwap.Load(); ns != 0 {
		s.LastSwap = time.Unix(0, ns)
	}
	s.FeedPosition, s.FeedLag, s.Snapshots = g.m.feedPosition.Load(), time.Duration(g.m.feedLag.Load()), g.m.snapshots.Load()
	s.AuditSamples, s.AuditFalseNegatives = g.m.auditSamples.Load(), g.m.auditFalseNegatives.Load()
	for i := range g.m.feedErrors {
		s.FeedErrors += g.m.feedErrors[i].Load()
	}
	g.mu.Lock()
	s.UnappliedRemoves = g.unapplied
	s.JournalAdds = g.journal.n
	g.mu.Unlock()
	return s
}

// Lookup is the read-through path: it returns (zero, false, nil) at once when
// the gate proves key absent, and otherwise calls fetch, which returns the
// value and whether a row was found. Concurrent Lookups of the same
// (normalised) key share one fetch; the shared fetch runs with the context of
// the caller that started it. A shared fetch that finds nothing after an
// authoritative "maybe" counts once as an observed false positive.
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
		if err == nil && !found && authoritative {
			g.m.emptyFetches.Add(1)
		}
		return fetchResult[V]{v, found}, err
	})
	if err != nil {
		return zero, false, err
	}
	r := res.(fetchResult[V])
	return r.v, r.found, nil
}

type fetchResult[V any] struct {
	v     V
	found bool
}
