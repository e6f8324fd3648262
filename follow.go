package bloomgate

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
	"github.com/bloomgate/bloomgate/internal/freshness"
)

// Feed is a change feed with exact positions, such as PostgreSQL logical
// replication (changefeed.Feed, which says what Follow expects of it and the
// optional capabilities it looks for).
type Feed = changefeed.Feed

// RelayedHead is implemented by a Feed whose head was read by another
// process and relayed (changefeed.RelayedHead).
type RelayedHead = changefeed.RelayedHead

// Generations is implemented by a snapshot-only Feed whose filters are
// built elsewhere and published as generations while it streams, such as a
// fan-out instance (changefeed.Generations, which says how Follow swaps
// them in).
type Generations = changefeed.Generations

// generationOf is implemented by a Feed that knows the generation of the
// snapshot Follow loaded last (a fan-out instance).
type generationOf interface{ Generation() uint64 }

type feedEstimator interface {
	Estimate(ctx context.Context) (int64, error)
}

type feedErrer interface{ Err() error }

type snapshotOnly interface{ SnapshotOnly() bool }

// FollowConfig configures Gate.Follow. The zero value of every field means
// its default.
type FollowConfig struct {
	// Identity names the set, such as "app.users.email". A snapshot taken
	// under another identity is skipped. Default: "".
	Identity string
	// Snapshots keeps the filter and its position across restarts: Follow
	// starts from the newest valid one and catches up from its position,
	// instead of bootstrapping. Positions are confirmed to the feed only
	// once a snapshot holding them is durable. Default: nil, no snapshots:
	// every start bootstraps, and positions are confirmed as applied.
	Snapshots SnapshotStore
	// SnapshotInterval is how often a snapshot is taken while following;
	// one is also taken after every bootstrap and rebuild, when Follow
	// returns, and when a database feed's stream has been quiet for a
	// second with its position in no snapshot (at most every quarter
	// interval: PostgreSQL's fast shutdown waits for that confirmation).
	// Default: 1 minute.
	SnapshotInterval time.Duration
	// SnapshotTimeout bounds writing one snapshot (Snapshots.Save and the
	// Confirm after it). The filter is encoded in memory while the stream
	// waits; the write runs beside the stream. Default: 1 minute.
	SnapshotTimeout time.Duration
	// MaxLag bounds staleness, and is the only lag setting that decides
	// readiness: the gate answers "absent" only while every transaction
	// committed more than MaxLag ago has been applied, and fails open
	// otherwise (a stalled or disconnected feed, a backlog, a process
	// paused past it). Default: 30 s.
	MaxLag time.Duration
	// MaxSnapshotBytes bounds the memory a loaded snapshot's filter may
	// take. Default: package filter's decoding default.
	MaxSnapshotBytes uint64
	// MinCapacity is the least capacity of a filter Follow builds, so that
	// a table that starts empty does not rebuild at every few keys.
	// Default: 65536 (about 120 KB for a Bloom filter at 0.1 %).
	MinCapacity uint64
}

// Defaults of FollowConfig's fields.
const (
	DefaultSnapshotInterval = time.Minute
	DefaultSnapshotTimeout  = time.Minute
	DefaultMaxLag           = 30 * time.Second
	DefaultMinCapacity      = 1 << 16
)

// Growth: Follow rebuilds a filter once it holds growAt of its capacity,
// into one sized for growFactor times the keys it holds (with headroom), so
// that a table growing from empty rebuilds O(log n) times and the serving
// filter still has room, a tenth of its capacity, for the writes made during
// the rebuild. A filter sized for a table that does not grow holds
// 1/(1+Headroom) of its capacity (80 % by default), below growAt.
const (
	growAt     = 0.9
	growFactor = 2
)

// Follow keeps the gate in step with a change feed until ctx is done or the
// gate is closed, and returns ctx's error or ErrClosed. It replaces Run: every row any writer
// commits reaches the filter, deletes included, without Add or Remove (Add
// before commit still gives a writer its own rows at once).
//
// Follow starts from the newest valid snapshot in cfg.Snapshots, or else
// bootstraps the feed, then applies the stream. The gate answers "absent"
// only once it has caught up with the feed's head as of the start, and
// while no transaction older than MaxLag is waiting; otherwise it fails
// open. When the feed loses its position (changefeed.ErrRebuild) Follow
// fails open and bootstraps afresh. It rebuilds the filter from a fresh
// snapshot of the feed, while the stream goes on, on the triggers Run uses
// (schedule, overfill, the degraded state), when deletes pile up that the
// filter could not apply, after a TRUNCATE, and ahead of growth (see
// FollowConfig.MinCapacity): a filter nearly at capacity is rebuilt twice as
// large while it still has room.
//
// When the feed fails, Follow fails open at once, logs the error with its
// cause, counts it in bloomgate_feed_errors_total{cause} and puts it in
// State's reason, then retries with backoff. Causes: "setup" (the error
// wraps changefeed.ErrSetup: a permission, publication or table an operator
// must fix; logged at error level, retried every minute at most, and
// returned by WaitReady at once), "timeout" (changefeed.ErrTimeout or a
// deadline), "rebuild" (changefeed.ErrRebuild: bootstrap again) and
// "other".
func (g *Gate) Follow(ctx context.Context, feed Feed, cfg FollowConfig) error {
	defaults.Set(&cfg.SnapshotInterval, DefaultSnapshotInterval)
	defaults.Set(&cfg.SnapshotTimeout, DefaultSnapshotTimeout)
	defaults.Set(&cfg.MaxLag, DefaultMaxLag)
	defaults.Set(&cfg.MinCapacity, DefaultMinCapacity)
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	if g.following {
		g.mu.Unlock()
		return errors.New("bloomgate: Follow is already running")
	}
	g.following = true
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.following = false
		g.mu.Unlock()
	}()
	// Close ends the run: ctx is cancelled with ErrClosed as its cause.
	parent := ctx
	ctx, cancel := context.WithCancelCause(parent)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		select {
		case <-g.closing:
			cancel(ErrClosed)
		case <-ctx.Done():
		}
	}()
	defer func() { cancel(nil); <-watched }()
	fresh := false
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	for {
		fl := &follower{g: g, feed: feed, cfg: cfg}
		if so, ok := feed.(snapshotOnly); ok && so.SnapshotOnly() {
			fl.noRebuild = true
		}
		err := fl.run(ctx, fresh)
		fl.mu.Lock()
		applied := fl.applied
		fl.mu.Unlock()
		if err := parent.Err(); err != nil {
			return err
		}
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return ErrClosed
		}
		fresh = errors.Is(err, changefeed.ErrRebuild)
		cause := feedCause(err)
		g.m.feedErrors[cause].Add(1)
		g.feedErr.Store(&feedFailure{err: err, cause: cause})
		retry.Max = 30 * time.Second
		if cause == causeSetup {
			retry.Max = time.Minute
			g.cfg.Logger.Error("bloomgate: change feed setup is incomplete; failing open until an operator fixes it",
				"err", err, "cause", cause, "retry_in", retry.Delay())
		} else {
			g.cfg.Logger.Warn("bloomgate: change feed failed; failing open and restarting",
				"err", err, "cause", cause, "bootstrap", fresh, "retry_in", retry.Delay())
		}
		g.degradeFeed(fmt.Sprintf("%s: %v", cause, err))
		if err := retry.Wait(ctx); err != nil {
			if perr := parent.Err(); perr != nil {
				return perr
			}
			return ErrClosed
		}
		if applied > 0 {
			retry.Reset()
		}
	}
}

// feedFailure is the last error that ended a run of Follow.
type feedFailure struct {
	err   error
	cause failCause
}

// failCause classifies a feed's error for logs, metrics and WaitReady.
type failCause uint8

const (
	causeOther failCause = iota
	causeSetup
	causeTimeout
	causeRebuild
	numCauses
)

func (c failCause) String() string {
	switch c {
	case causeSetup:
		return "setup"
	case causeTimeout:
		return "timeout"
	case causeRebuild:
		return "rebuild"
	}
	return "other"
}

func feedCause(err error) failCause {
	switch {
	case errors.Is(err, changefeed.ErrSetup):
		return causeSetup
	case errors.Is(err, changefeed.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return causeTimeout
	case errors.Is(err, changefeed.ErrRebuild):
		return causeRebuild
	}
	return causeOther
}

// WaitReady blocks until the gate is ready (Ready reports true) and returns
// nil. It returns early with the error when Follow has failed on a setup
// error no retry can heal (it wraps changefeed.ErrSetup), and when ctx is
// done with ctx's error and the state's reason.
func (g *Gate) WaitReady(ctx context.Context) error {
	for {
		g.mu.Lock()
		ch := g.changed
		if ch == nil {
			ch = make(chan struct{})
			g.changed = ch
		}
		g.mu.Unlock()
		if g.Ready() {
			return nil
		}
		if ff := g.feedErr.Load(); ff != nil && ff.cause == causeSetup {
			return fmt.Errorf("bloomgate: not ready: %w", ff.err)
		}
		// Readiness also turns on the lag check's clock, which publishes
		// nothing: look again now and then.
		t := time.NewTimer(10 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			st, reason := g.State()
			return fmt.Errorf("bloomgate: not ready (%v: %s): %w", st, reason, ctx.Err())
		case <-ch:
			t.Stop()
		case <-t.C:
		}
	}
}

// degradeFeed fails open for a reason of the feed's, unless the gate is
// already failing open for a reason that is not the feed's.
func (g *Gate) degradeFeed(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.view.Load(); v.state != StateDegraded || v.owner == ownerFeed {
		g.setOwnedStateLocked(StateDegraded, ownerFeed, "change feed: "+reason)
	}
}

// follower is one run of Follow: from a snapshot or bootstrap to the end of
// a stream.
//
// Lock order: Gate.buildMu, then follower.mu, then Gate.mu; the feed's own
// locks come last (Confirm is called with follower.mu held). Readers take
// none of them.
type follower struct {
	g    *Gate
	feed Feed
	cfg  FollowConfig

	mu           sync.Mutex // serialises applying, snapshots and the rebuild's swap
	pos          changefeed.Position
	applied      int64
	heads        freshness.Tracker // the feed's heads read (the invariant: internal/freshness)
	headErr      error             // the last Head error, nil once one succeeds
	caughtUp     bool
	lastSnapshot time.Time
	lastCheck    time.Time
	lastApply    time.Time           // when the stream last delivered a transaction
	snapPos      changefeed.Position // the position of the last snapshot taken
	unknown      uint64              // deletes the serving filter could not apply
	truncated    bool                // a TRUNCATE reached the serving filter: rebuild
	capacity     uint64              // the serving filter's
	// heldBelow: the serving filter, a rebuild's, already holds every
	// transaction with a commit below it (its copy's point); a lagging stream
	// still delivers them, and they must not reach it twice.
	heldBelow changefeed.Position
	rebuild   *feedRebuild
	retry     rebuildCause // a rebuild to start again (its filter refused a key)
	retryCap  uint64       // the least capacity for it
	saving    bool         // a snapshot is being written
	// Failed rebuilds in a row: the next starts no sooner than after
	// backoff, and a failure that repeats is logged with its count, not
	// at every transaction.
	failed       int
	failedErr    string
	rebuildAfter time.Time
	noRebuild    bool // the feed is snapshot-only
	// The serving filter's growth, for a growth rebuild that finishes
	// before the filter fills: items per second (a decaying maximum), and
	// how long the last bootstrap or rebuild took, and for how many keys.
	rate      float64
	rateAt    time.Time
	rateItems uint64
	ratePos   changefeed.Position
	perPos    float64 // keys per unit of position applied (a stream's backlog in keys)
	// The same for the window still open: its keys over a whole window (a
	// lower bound of what it will measure), so that a table that starts
	// growing fast, or a stream catching up after a stall, counts before
	// the window ends, when the filter may have filled.
	openRate, openPerPos float64
	buildDur             time.Duration
	buildKeys            uint64
	// Readers of the snapshots (a fan-out feeder's instances) swap in a
	// newer filter only once its snapshot is saved and they have read it:
	// saveDur and saveKeys time the last save, genPending marks a newer
	// filter whose snapshot waits for a save under way to end, or for the
	// stream to reach its copy's point.
	saveDur    time.Duration
	saveKeys   uint64
	genPending bool
	// swap: a newer generation being caught up (Generations), and
	// swapFailed, how to end the stream when it cannot be.
	swap       *feedSwap
	swapFailed context.CancelCauseFunc
	wg         sync.WaitGroup
}

// feedSwap is a newer generation's filter on its way to serving: nf holds
// exactly the transactions up to pos. The catch-up moves pos up to the
// serving filter's position, or the stream moves the serving filter's up to
// pos; where they meet, nf replaces it.
type feedSwap struct {
	nf      Filter
	pos     changefeed.Position
	gen     uint64
	from    changefeed.Position // the snapshot's position
	start   time.Time
	refused bool // nf refused a key: it cannot serve
}

// errSwapFailed ends a stream whose newer generation could not be swapped
// in beside it: Follow loads the newest snapshot instead.
var errSwapFailed = errors.New("bloomgate: the newer filter could not be swapped in beside the stream; loading it afresh")

// errSwapped ends a catch-up that reached the serving filter's position.
var errSwapped = errors.New("bloomgate: swapped")

type feedRebuild struct {
	nf Filter
	// buffered: nf is a Bloom filter filled through a BloomBuilder, so
	// concurrent Adds wait in the gate's pendingBuf until the swap.
	buffered bool
	capacity uint64
	cause    rebuildCause
	buf      []hashedTxn // transactions applied while its snapshot ran
	refused  bool        // nf refused a key: too small
	cancel   context.CancelFunc
}

// rebuildCause says why Follow rebuilds.
type rebuildCause uint8

const (
	causeNoRebuild rebuildCause = iota
	causeGrowth
	causeTruncate
	causeDegraded
	causeSchedule
	causeOverfill
	causeDeletes
)

func (c rebuildCause) String() string {
	switch c {
	case causeGrowth:
		return "growth"
	case causeTruncate:
		return "table truncated"
	case causeDegraded:
		return "degraded"
	case causeSchedule:
		return "schedule"
	case causeOverfill:
		return "overfilled"
	case causeDeletes:
		return "deletes the filter could not apply"
	}
	return "none"
}

type hashedTxn struct {
	commit          changefeed.Position
	adds, removes   []uint64
	unknown, clears int
}

func (fl *follower) run(ctx context.Context, fresh bool) error {
	g := fl.g
	loaded := false
	if fl.cfg.Snapshots != nil && !fresh {
		loaded = fl.load(ctx)
	}
	if !loaded {
		if err := fl.bootstrap(ctx); err != nil {
			return err
		}
	}
	if err := fl.markHead(ctx); err != nil {
		// A relayed head may simply not be there yet (a fan-out instance
		// waits for the feeder's next read of the database): the watch
		// marks it when it is; until then the gate is not fresh.
		if _, relayed := fl.feed.(RelayedHead); !relayed {
			return err
		}
	}
	sctx, cancel := context.WithCancelCause(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { fl.watch(sctx) })
	if gens, ok := fl.feed.(Generations); ok && fl.noRebuild {
		fl.mu.Lock()
		fl.swapFailed = cancel
		fl.mu.Unlock()
		wg.Go(func() { fl.followGenerations(sctx, gens) })
	}
	err := fl.feed.Stream(sctx, fl.pos, fl.apply)
	if c := context.Cause(sctx); ctx.Err() == nil && errors.Is(c, errSwapFailed) {
		err = c
	}
	cancel(nil)
	wg.Wait()
	fl.mu.Lock()
	fl.swap = nil
	if rb := fl.rebuild; rb != nil {
		fl.rebuild = nil
		rb.cancel()
		g.abandonPending(rb.nf)
	}
	fl.mu.Unlock()
	fl.wg.Wait() // snapshots in flight
	if ctx.Err() != nil && fl.cfg.Snapshots != nil {
		// On shutdown: a last snapshot, so the next start catches up little.
		fl.mu.Lock()
		data, pos, serr := fl.encodeLocked()
		fl.mu.Unlock()
		if serr == nil && data != nil {
			serr = fl.save(pos, data)
		}
		if serr != nil {
			g.cfg.Logger.Error("bloomgate: snapshot on shutdown failed", "err", serr)
		}
	}
	return err
}

// load installs the newest valid snapshot as the gate's filter, failing open
// until the stream catches up.
func (fl *follower) load(ctx context.Context) bool {
	g := fl.g
	start := g.cfg.Now()
	var f Filter
	var pos changefeed.Position
	tried := false
	err := fl.cfg.Snapshots.Load(ctx, func(r io.Reader) error {
		tried = true
		var err error
		f, pos, err = readSnapshot(r, fl.cfg.Identity, fl.cfg.MaxSnapshotBytes)
		if err != nil {
			g.cfg.Logger.Warn("bloomgate: skipping snapshot", "err", err)
		}
		return err
	})
	if err != nil {
		if tried {
			g.m.observeBuild("snapshot", g.cfg.Now().Sub(start), err)
		}
		g.cfg.Logger.Info("bloomgate: no usable snapshot; bootstrapping", "err", err)
		return false
	}
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	fl.mu.Lock()
	defer fl.mu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.building {
		return false
	}
	g.seed = f.Seed()
	g.journal = newJournal(g.cfg.RebuildOverlap) // its hashes used the old seed
	var gen uint64
	if gf, ok := fl.feed.(generationOf); ok {
		gen = gf.Generation()
	}
	fl.publishLocked(f, capacityOf(f), gen)
	fl.pos, fl.snapPos = pos, pos
	g.m.observeBuild("snapshot", g.cfg.Now().Sub(start), nil)
	g.cfg.Logger.Info("bloomgate: snapshot loaded", "position", pos, "seconds", g.cfg.Now().Sub(start).Seconds())
	return true
}

// publishLocked makes f, of generation gen, the serving filter,
// authoritative only if the follower has caught up. fl.mu and g.mu are
// held.
func (fl *follower) publishLocked(f Filter, capacity, gen uint64) {
	g := fl.g
	now := g.cfg.Now()
	nv := &view{state: StateReady, f: f, seed: f.Seed(), followed: true, snapshotAt: now, builtAt: now, gen: gen}
	nv.rm, _ = f.(Remover)
	switch {
	case g.closed:
		nv.state, nv.reason = StateDegraded, "closed"
	case !fl.caughtUp:
		nv.state, nv.owner, nv.reason = StateDegraded, ownerFeed, "change feed: catching up"
	}
	g.publishLocked(nv)
	g.unapplied = 0
	fl.unknown, fl.truncated, fl.capacity, fl.heldBelow = 0, false, capacity, 0
	fl.rateAt = time.Time{} // the rate goes on; its count starts again
	// A new filter is checked a CheckInterval from now (its Stats reads the
	// whole table), and snapshotted by the caller or a SnapshotInterval
	// from now: a loaded snapshot is one already.
	fl.lastCheck, fl.lastSnapshot = now, now
}

// estimate sizes the first filter: the feed's own estimate if it has one,
// else Config.Source's, else 0.
func (fl *follower) estimate(ctx context.Context) int64 {
	g := fl.g
	var est func(context.Context) (int64, error)
	if e, ok := fl.feed.(feedEstimator); ok {
		est = e.Estimate
	} else if g.cfg.Source != nil {
		est = g.cfg.Source.Estimate
	} else {
		return 0
	}
	n, err := est(ctx)
	if err != nil {
		if ctx.Err() == nil { // not when the follow is ending
			g.cfg.Logger.Warn("bloomgate: estimate failed; sizing without it", "err", err)
		}
		return 0
	}
	return n
}

// sizeFor is the capacity for n keys: with the configured headroom, times
// growth, never below MinCapacity (nor Config.Capacity, when set).
func (fl *follower) sizeFor(n float64, growth float64) uint64 {
	g := fl.g
	c := uint64(math.Ceil(growth * (1 + g.cfg.Headroom) * max(n, 0)))
	return max(c, fl.cfg.MinCapacity, g.cfg.Capacity)
}

// bootstrap builds a filter from the feed's fresh snapshot, sized from the
// estimate; a filter that fills up is started over twice as large, and one
// the snapshot filled past its growth point is rebuilt larger at once.
func (fl *follower) bootstrap(ctx context.Context) error {
	g := fl.g
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	start := g.cfg.Now()
	capacity := fl.sizeFor(float64(fl.estimate(ctx)), 1)
	reread := false
	for {
		nf, err := g.newFilter(capacity)
		if err != nil {
			return err
		}
		var keys int64
		add, finish := fl.copyAdder(nf)
		pos, err := fl.feed.Bootstrap(ctx, func(key []byte) error {
			keys++
			return add(key)
		})
		if err == nil {
			err = finish()
		}
		if errors.Is(err, filter.ErrFull) && capacity < 1<<40 {
			capacity = max(2*capacity, fl.sizeFor(float64(keys), growFactor))
			continue
		}
		if err == nil && !reread && float64(keys) >= growAt*float64(capacity) && capacity < 1<<40 {
			// The estimate was short (statistics from before the table
			// was filled, or none): a filter this full would serve above
			// its rate until the first growth rebuild, and a table that
			// is not written to never has one. Read it again into one
			// sized for what it holds, before turning ready.
			next := fl.sizeFor(float64(keys), 1)
			g.cfg.Logger.Info("bloomgate: the table holds more keys than the filter was sized for; bootstrapping again",
				"keys", keys, "capacity", capacity, "new_capacity", next)
			capacity, reread = next, true // once: growth rebuilds take it from there
			continue
		}
		g.m.observeBuild("bootstrap", g.cfg.Now().Sub(start), err)
		if err != nil {
			return fmt.Errorf("bloomgate: bootstrap: %w", err)
		}
		fl.mu.Lock()
		g.mu.Lock()
		fl.publishLocked(nf, capacity, g.m.builds.Add(1))
		g.mu.Unlock()
		fl.pos = pos
		fl.buildDur, fl.buildKeys = g.cfg.Now().Sub(start), uint64(keys)
		fl.snapshotLocked()
		fl.mu.Unlock()
		g.cfg.Logger.Info("bloomgate: filter bootstrapped from the change feed", "keys", keys, "position", pos,
			"capacity", capacity, "seconds", g.cfg.Now().Sub(start).Seconds())
		return nil
	}
}

// copyAdder returns how a copy of the table (the bootstrap's, or that of a
// rebuild installed with buffered adds) adds keys to nf, a filter no other
// goroutine can reach until it is published, and finish, to be called (on
// success) before it is. A Bloom filter is filled through a
// filter.BloomBuilder, a group of hashes at a time: plain writes whose cache
// misses overlap, where Add's atomic OR waits for each one (at 100 M keys
// that was most of the bootstrap's time). Other kinds are filled key by key.
// The feed calls add one call at a time, which is all the builder needs.
func (fl *follower) copyAdder(nf Filter) (add func(key []byte) error, finish func() error) {
	b, ok := nf.(*filter.Bloom)
	if !ok {
		return func(key []byte) error { return fl.addKey(nf, key) }, func() error { return nil }
	}
	bb := b.Builder()
	var group [256]uint64
	n := 0
	add = func(key []byte) error {
		h, err := fl.g.hash(key, b.Seed())
		if err != nil {
			return nil // over MaxKeyLen: always "maybe"
		}
		group[n] = h
		if n++; n == len(group) {
			bb.AddHashMany(group[:])
			n = 0
		}
		return nil
	}
	finish = func() error {
		bb.AddHashMany(group[:n])
		n = 0
		bb.Finish() // published by publishLocked's atomic store
		return nil
	}
	return add, finish
}

// addKey adds a scanned key to nf, skipping keys over MaxKeyLen (always
// "maybe" at lookup time).
func (fl *follower) addKey(nf Filter, key []byte) error {
	h, err := fl.g.hash(key, nf.Seed())
	if err != nil {
		return nil
	}
	return nf.AddHash(h)
}

// markHead records the feed's head: once the stream passes it, every
// transaction committed before the mark's time has been applied. A plain
// Feed's head is marked with the time before the read; a RelayedHead
// feed's with the lower bound of its read that it reports.
func (fl *follower) markHead(ctx context.Context) error {
	at := fl.g.cfg.Now()
	var head changefeed.Position
	var err error
	if rh, ok := fl.feed.(RelayedHead); ok {
		var age time.Duration
		head, age, err = rh.HeadAge(ctx)
		if now := fl.g.cfg.Now(); err == nil && now.Add(-age).Before(at) {
			at = now.Add(-age)
		}
	} else {
		head, err = fl.feed.Head(ctx)
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.headErr = err
	if err != nil {
		fl.updateLocked(fl.g.cfg.Now(), true)
		return fmt.Errorf("bloomgate: feed head: %w", err)
	}
	fl.heads.Mark(freshness.Mark{At: at, Head: head})
	fl.updateLocked(fl.g.cfg.Now(), true)
	return nil
}

// watch marks the head regularly, so a stalled stream turns the gate not
// ready within about MaxLag.
//
// A relayed head (a fan-out instance's) is marked every relayedStartTick
// until the gate is first fresh: a starting instance has a head whose age
// it can bound only once the feeder has read the database's head twice
// after the instance's first look, and waiting for the next tick after
// that added up to a second to its start. Such a mark reads the relaying
// store, not the database.
func (fl *follower) watch(ctx context.Context) {
	every := min(max(fl.cfg.MaxLag/4, 10*time.Millisecond), time.Second)
	_, relayed := fl.feed.(RelayedHead)
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		fl.mu.Lock()
		starting := relayed && !fl.caughtUp
		fl.mu.Unlock()
		if starting {
			t.Reset(min(relayedStartTick, every))
		} else {
			t.Reset(every)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fl.markHead(ctx)
		fl.snapshotIdle()
	}
}

// relayedStartTick is how often watch marks a relayed head until the gate
// is first fresh.
const relayedStartTick = 5 * time.Millisecond

// idleSnapshotAfter is how long a stream must have delivered nothing before
// snapshotIdle takes the snapshot applying would have taken.
const idleSnapshotAfter = time.Second

// snapshotIdle snapshots a database feed's applied position once the stream
// has gone quiet with that position in no snapshot, at most every quarter
// SnapshotInterval. Snapshots are otherwise taken as transactions arrive,
// and a follower confirms positions only at its snapshots; PostgreSQL's
// fast shutdown waits until the slot's consumer confirms everything it was
// sent, and then sends nothing more: without this it waited for ever.
// Instances (snapshot-only feeds) hold no database up and are left alone.
func (fl *follower) snapshotIdle() {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	now := fl.g.cfg.Now()
	if fl.cfg.Snapshots == nil || fl.noRebuild || fl.rebuild != nil || fl.pos <= fl.snapPos ||
		now.Sub(fl.lastApply) < idleSnapshotAfter || now.Sub(fl.lastSnapshot) < fl.cfg.SnapshotInterval/4 {
		return
	}
	fl.snapshotLocked()
}

// lagLocked returns how far the applied position is behind: the age of the
// newest head mark it has passed (a mark not yet passed is outstanding).
func (fl *follower) lagLocked(now time.Time) (time.Duration, bool) {
	fl.heads.Advance(fl.pos)
	return fl.heads.Lag(now)
}

// updateLocked turns the gate ready or failing open by the feed's lag;
// refresh also rewrites the reason of a gate failing open for the feed (the
// lag check does, every tick; applying a transaction does not).
func (fl *follower) updateLocked(now time.Time, refresh bool) {
	g := fl.g
	lag, ok := fl.lagLocked(now)
	fresh := ok && lag <= fl.cfg.MaxLag
	g.m.feedLag.Store(int64(lag))
	if g.m.feedPosition.Swap(uint64(fl.pos)) != uint64(fl.pos) {
		g.positionChanged()
	}
	if fresh {
		fl.caughtUp = true
		g.freshUntil.Store(g.clock() + int64(fl.cfg.MaxLag-lag))
	}
	change := func(v *view) bool {
		ours := v.state == StateDegraded && v.owner == ownerFeed
		return v.f != nil && (fresh && ours || !fresh && (v.authoritative() && fl.caughtUp || ours && refresh))
	}
	if !change(g.view.Load()) {
		return // the common case, without the gate's lock
	}
	var reason string
	if !fresh {
		reason = fl.lagReasonLocked(lag, ok)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	switch v := g.view.Load(); {
	case !change(v):
	case fresh:
		g.setOwnedStateLocked(StateReady, ownerNone, "")
	case v.reason != reason:
		g.setOwnedStateLocked(StateDegraded, ownerFeed, reason)
	}
}

// lagReasonLocked says why the gate is not fresh, with the feed's last
// error if it reports one.
func (fl *follower) lagReasonLocked(lag time.Duration, passed bool) string {
	reason := "change feed: catching up"
	if passed && fl.caughtUp {
		reason = fmt.Sprintf("change feed: lag %v exceeds MaxLag %v", lag.Round(time.Millisecond), fl.cfg.MaxLag)
	}
	if fl.headErr != nil {
		reason += fmt.Sprintf("; %s: %v", feedCause(fl.headErr), fl.headErr)
	}
	if fe, ok := fl.feed.(feedErrer); ok {
		if err := fe.Err(); err != nil {
			reason += fmt.Sprintf("; %s: %v", feedCause(err), err)
		}
	}
	return reason
}

// apply applies one transaction from the stream.
func (fl *follower) apply(t changefeed.Txn) error {
	g := fl.g
	fl.mu.Lock()
	defer fl.mu.Unlock()
	ht := fl.hashTxn(t)
	v := g.view.Load()
	if v.f != nil && t.Commit >= fl.heldBelow {
		fl.applyTo(v.f, ht, true)
	}
	if rb := fl.rebuild; rb != nil {
		rb.buf = append(rb.buf, ht)
	}
	prev := fl.pos
	fl.pos = t.End
	fl.applied++
	fl.lastApply = g.cfg.Now()
	if sw := fl.swap; sw != nil && sw.pos > prev && sw.pos <= fl.pos {
		// The newer generation was ahead of the stream, which has reached
		// it: sw holds every transaction ending at or before sw.pos, and
		// t is the first ending after prev, so sw holds everything before
		// t, and t too unless t ends beyond sw.pos.
		if sw.pos < fl.pos {
			fl.applyTo(sw.nf, ht, false)
			sw.pos = fl.pos
		}
		fl.swapLocked(sw)
	}
	now := g.cfg.Now()
	fl.updateLocked(now, false)
	switch {
	case fl.cfg.Snapshots == nil:
		if err := fl.feed.Confirm(context.Background(), fl.pos); err != nil {
			g.cfg.Logger.Warn("bloomgate: confirming a position to the change feed failed", "position", fl.pos, "err", err)
		}
	case (fl.genPending || now.Sub(fl.lastSnapshot) >= fl.cfg.SnapshotInterval) && fl.rebuild == nil:
		// genPending: a rebuilt filter's snapshot waits for a save under
		// way to end, or for the stream to reach the rebuild's copy.
		fl.snapshotLocked()
	}
	if fl.rebuild == nil && !fl.noRebuild && !now.Before(fl.rebuildAfter) {
		// Growth is checked at every transaction (it costs a comparison);
		// the other triggers every CheckInterval.
		cause := fl.growthLocked(v, now)
		if cause == causeNoRebuild && now.Sub(fl.lastCheck) >= g.cfg.CheckInterval {
			fl.lastCheck = now
			cause = fl.rebuildCauseLocked()
		}
		if cause != causeNoRebuild {
			fl.startRebuildLocked(cause)
		}
	}
	return nil
}

// growthLocked reports causeGrowth when the serving filter holds growAt of
// its capacity, or would fill before a rebuild started now could finish
// (twice the last build's time at the filter's growth rate), or the cause
// of a rebuild whose filter refused a key and must start over.
func (fl *follower) growthLocked(v *view, now time.Time) rebuildCause {
	if fl.retry != causeNoRebuild {
		return fl.retry
	}
	if v.f == nil || fl.capacity == 0 {
		return causeNoRebuild
	}
	n := items(v.f)
	switch d := now.Sub(fl.rateAt); {
	case fl.rateAt.IsZero() || n < fl.rateItems || fl.pos < fl.ratePos:
		fl.rateAt, fl.rateItems, fl.ratePos = now, n, fl.pos
		fl.openRate, fl.openPerPos = 0, 0
	case d < rateWindow:
		dn := float64(n - fl.rateItems)
		fl.openRate = dn / rateWindow.Seconds()
		if dp := fl.pos - fl.ratePos; dp > 0 {
			fl.openPerPos = dn / float64(dp)
		}
	default:
		r := float64(n-fl.rateItems) / d.Seconds()
		fl.rate = max(r, fl.rate*rateDecay)
		if dp := fl.pos - fl.ratePos; dp > 0 {
			k := float64(n-fl.rateItems) / float64(dp)
			fl.perPos = max(k, fl.perPos*rateDecay)
		}
		fl.rateAt, fl.rateItems, fl.ratePos = now, n, fl.pos
		fl.openRate, fl.openPerPos = 0, 0
	}
	room := float64(fl.capacity) - float64(n)
	if float64(n) >= growAt*float64(fl.capacity) || room <= fl.arrivingLocked(n) {
		return causeGrowth
	}
	return causeNoRebuild
}

// arrivingLocked is how many keys may reach a filter holding n before a
// rebuild started now is swapped in: the stream's backlog (committed, not
// yet applied: the feed's newest head beyond the applied position, at the
// keys per position seen), and the growth rate times thrice the last
// build's time, scaled to n keys (a rebuild copies the table), so that the
// serving filter still has room when it is swapped out.
func (fl *follower) arrivingLocked(n uint64) float64 {
	scale := max(1, float64(n)/float64(max(fl.buildKeys, fl.cfg.MinCapacity)))
	backlog := 0.0
	if m, ok := fl.heads.Newest(); ok && m.Head > fl.pos {
		backlog = float64(m.Head-fl.pos) * max(fl.perPos, fl.openPerPos)
	}
	build := fl.buildDur.Seconds() * scale
	if fl.buildKeys < fl.cfg.MinCapacity {
		// The last build read too few keys to time a copy by (a table that
		// started empty): assume minCopyPerKey a key.
		build = max(build, float64(n)*minCopyPerKey.Seconds())
	}
	return backlog + max(fl.rate, fl.openRate)*(3*build+fl.readersLagLocked(n))
}

// snapshotReaders is implemented by a SnapshotStore whose snapshots other
// processes swap in (a fan-out feeder's, read by its instances): ReadDelay
// is how long after a Save they may take to notice it.
type snapshotReaders interface{ ReadDelay() time.Duration }

// readersLagLocked is how long, in seconds, the readers of the snapshots
// keep serving the old filter after a rebuild is published: at most two
// saves (one under way may be in the way), their read delay, and their
// load, about a save's time again, each save scaled to n keys. Zero for a
// store nobody else reads.
func (fl *follower) readersLagLocked(n uint64) float64 {
	r, ok := fl.cfg.Snapshots.(snapshotReaders)
	if !ok {
		return 0
	}
	save := fl.saveDur.Seconds() * max(1, float64(n)/float64(max(fl.saveKeys, 1)))
	return r.ReadDelay().Seconds() + 3*save
}

// minCopyPerKey is what a growth trigger assumes a rebuild's copy costs per
// key until a build has timed one of at least MinCapacity keys: PostgreSQL's
// COPY into a filter took 2–4 µs a key on a 2-core machine at load 3, and
// 13 µs at load 8 while the table grew by 32,000 rows a second
// (TestFollowGrowth, whose cuckoo filter filled during a rebuild timed at
// 5 µs). Only a fast-growing table notices it: its first growth rebuild
// starts earlier.
const minCopyPerKey = 15 * time.Microsecond

// The growth rate is measured over rateWindow; a slower window keeps
// rateDecay of the rate before, so a burst is remembered for a few seconds.
const (
	rateWindow = 200 * time.Millisecond
	rateDecay  = 0.8
)

// capacityOf is the filter's capacity, without reading the table where the
// filter can tell (a Bloom filter's Stats costs a pass with a logarithm per
// block: tens of milliseconds at 10 M keys, on a cold start's path).
func capacityOf(f Filter) uint64 {
	if s, ok := f.(interface{ Sizing() filter.Sizing }); ok {
		return s.Sizing().Capacity
	}
	return f.Stats().Capacity
}

// items is the filter's item count, cheaply where it can tell.
func items(f Filter) uint64 {
	if c, ok := f.(interface{ Items() uint64 }); ok {
		return c.Items()
	}
	return f.Stats().Items
}

// hashTxn hashes a transaction's keys with the gate's seed.
func (fl *follower) hashTxn(t changefeed.Txn) hashedTxn {
	g := fl.g
	seed := g.view.Load().seed // every filter of the gate shares it once one is published
	ht := hashedTxn{commit: t.Commit}
	for _, c := range t.Changes {
		switch c.Kind {
		case changefeed.Insert:
			if h, err := g.hash(c.Key, seed); err == nil {
				ht.adds = append(ht.adds, h)
			}
		case changefeed.Delete:
			if h, err := g.hash(c.Key, seed); err == nil {
				ht.removes = append(ht.removes, h)
			}
		case changefeed.UnknownDelete:
			ht.unknown++
		case changefeed.Truncate:
			ht.clears++
		}
	}
	return ht
}

// applyTo applies a transaction to f, the serving filter or a rebuild's:
// its adds first, so a key deleted and inserted again in one transaction is
// never absent, then its removes where f can remove. A Bloom filter takes
// the adds in one batch (filter.Bloom.AddHashMany: the blocks of a group of
// keys are fetched while the group before is set), which never refuses a key;
// like one AddHash after the other, it has set every key's bits when it
// returns, before the caller moves the position past the transaction.
func (fl *follower) applyTo(f Filter, t hashedTxn, serving bool) {
	g := fl.g
	adds := t.adds
	if b, ok := f.(*filter.Bloom); ok {
		b.AddHashMany(adds)
		adds = nil
	}
	for _, h := range adds {
		if err := f.AddHash(h); err != nil {
			if serving {
				// Full: fail open until a larger filter is built, at once.
				g.Degrade(fmt.Sprintf("filter refused a key from the change feed: %v", err))
				if fl.rebuild == nil {
					fl.retry = causeGrowth
				}
			} else if rb := fl.rebuild; rb != nil && rb.nf == f {
				rb.refused = true
			} else if sw := fl.swap; sw != nil && sw.nf == f {
				sw.refused = true
			}
		}
	}
	rm, _ := f.(Remover)
	for _, h := range t.removes {
		if rm == nil {
			if serving {
				fl.unknown++
			}
			continue
		}
		if err := rm.RemoveHash(h); err != nil && serving {
			g.m.removeMisses.Add(1)
		}
	}
	if serving {
		fl.unknown += uint64(t.unknown)
		if t.clears > 0 {
			fl.truncated = true
		}
	}
}

// rebuildCauseLocked says why the filter should be rebuilt from the feed,
// on the triggers checked every CheckInterval.
func (fl *follower) rebuildCauseLocked() rebuildCause {
	g := fl.g
	v := g.view.Load()
	switch {
	case v.f == nil:
		return causeNoRebuild
	case fl.truncated:
		return causeTruncate
	case v.state == StateDegraded && v.owner != ownerFeed:
		return causeDegraded
	case g.cfg.RebuildInterval > 0 && g.cfg.Now().Sub(v.builtAt) >= g.cfg.RebuildInterval:
		return causeSchedule
	}
	st := v.f.Stats()
	if st.EstimatedFPRate > g.cfg.OverfillFactor*g.cfg.FPRate {
		return causeOverfill
	}
	if fl.unknown > 0 && float64(fl.unknown) > g.cfg.RemoveRebuildRatio*float64(max(st.Items, 1)) {
		return causeDeletes
	}
	return causeNoRebuild
}

// startRebuildLocked builds a new filter from the feed's Rebuild while the
// stream goes on; transactions applied meanwhile are kept and replayed into
// it from its point on.
func (fl *follower) startRebuildLocked(cause rebuildCause) {
	g := fl.g
	retry := fl.retry != causeNoRebuild
	fl.retry = causeNoRebuild
	n, arriving := float64(0), 0.0
	growth := 1.0
	if v := g.view.Load(); v.f != nil {
		n = float64(items(v.f))
		if cause != causeTruncate && cause != causeDeletes {
			n = max(n, v.f.Stats().EstimatedDistinct)
		}
	}
	if cause == causeGrowth || retry {
		// Sized for the keys it will hold when it is swapped in, too.
		growth = growFactor
		arriving = fl.arrivingLocked(uint64(n))
	}
	items := n
	n += arriving
	capacity := max(fl.sizeFor(n, growth), fl.retryCap)
	fl.retryCap = 0
	nf, err := g.newFilter(capacity)
	if err != nil {
		fl.rebuildFailedLocked(err)
		return
	}
	_, buffered := nf.(*filter.Bloom) // filled like the bootstrap's (copyAdder)
	if _, _, err := g.install(nf, "rebuild", buffered); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rb := &feedRebuild{nf: nf, buffered: buffered, capacity: capacity, cause: cause, cancel: cancel}
	fl.rebuild = rb
	g.cfg.Logger.Info("bloomgate: rebuilding from the change feed", "reason", cause, "capacity", capacity,
		"serving_items", uint64(items), "serving_capacity", fl.capacity, "arriving", uint64(arriving), "keys_per_second", uint64(max(fl.rate, fl.openRate)))
	fl.wg.Go(func() { fl.runRebuild(ctx, rb) })
}

// runRebuild reads the feed's fresh snapshot into rb's filter, replays the
// transactions applied since, and swaps it in.
func (fl *follower) runRebuild(ctx context.Context, rb *feedRebuild) {
	g := fl.g
	defer rb.cancel()
	start := g.cfg.Now()
	var keys int64
	add, finish := fl.copyAdder(rb.nf)
	pos, err := fl.feed.Rebuild(ctx, func(key []byte) error {
		keys++
		return add(key)
	})
	if err == nil {
		err = finish() // from here on rb.nf takes atomic adds (replays, pendingBuf)
	}
	if errors.Is(err, filter.ErrFull) {
		rb.refused, err = true, nil
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.rebuild != rb {
		return // the run ended
	}
	fl.rebuild = nil
	if err != nil {
		g.m.observeBuild("rebuild", g.cfg.Now().Sub(start), err)
		fl.rebuildFailedLocked(err)
		g.abandonPending(rb.nf)
		return
	}
	replayed := 0
	for _, t := range rb.buf {
		if t.commit >= pos {
			fl.applyTo(rb.nf, t, false)
			replayed += len(t.adds)
		}
	}
	if rb.refused {
		// Too small for the table as it is now: start over at least twice
		// as large, and large enough for every key seen.
		fl.retryCap = max(2*rb.capacity, fl.sizeFor(float64(keys)+float64(replayed), growFactor))
		g.m.observeBuild("rebuild", g.cfg.Now().Sub(start), filter.ErrFull)
		g.cfg.Logger.Warn("bloomgate: the rebuilt filter filled up; rebuilding larger", "capacity", rb.capacity, "keys", keys)
		g.abandonPending(rb.nf)
		fl.retry = rb.cause
		return
	}
	g.m.observeBuild("rebuild", g.cfg.Now().Sub(start), nil)
	g.mu.Lock()
	if rb.buffered {
		for _, h := range g.pendingBuf { // Adds made during the rebuild
			rb.nf.AddHash(h) // a Bloom filter never refuses a key
		}
	}
	g.endBuildLocked()
	fl.publishLocked(rb.nf, rb.capacity, g.m.builds.Add(1))
	fl.heldBelow = pos
	fl.buildDur, fl.buildKeys = g.cfg.Now().Sub(start), uint64(keys)+uint64(replayed)
	g.noteSwapLocked()
	g.mu.Unlock()
	fl.genPending = true
	fl.snapshotLocked()
	g.cfg.Logger.Info("bloomgate: filter rebuilt from the change feed", "reason", rb.cause, "keys", keys, "position", pos,
		"capacity", rb.capacity, "seconds", g.cfg.Now().Sub(start).Seconds(), "failed_before", fl.failed)
	fl.failed, fl.failedErr, fl.rebuildAfter = 0, "", time.Time{}
}

// followGenerations swaps in each newer generation the feed publishes,
// one at a time, beside the stream; one that cannot be swapped in ends the
// stream (errSwapFailed), and Follow loads it as at a start.
func (fl *follower) followGenerations(ctx context.Context, gens Generations) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-gens.Newer():
		}
		if err := fl.swapGeneration(ctx, gens); err != nil && ctx.Err() == nil {
			fl.mu.Lock()
			fl.failSwapLocked(fl.swap, err)
			fl.mu.Unlock()
			return
		}
	}
}

// swapGeneration loads the newer generation's snapshot while the serving
// filter goes on answering and following the stream, catches it up to the
// serving filter's position, and swaps it in there (swapLocked). Neither
// filter ever misses a transaction the stream applied: the serving one gets
// every one as before; the newer one holds those up to its snapshot's
// position, then gets the rest from CatchUp (the same log, read a second
// time) up to where the stream is, or, when its snapshot is ahead of the
// stream, the stream reaches it. The view's one atomic store then switches
// readers from a filter holding every transaction up to P to another holding
// every transaction up to P.
func (fl *follower) swapGeneration(ctx context.Context, gens Generations) error {
	g := fl.g
	start := g.cfg.Now()
	var nf Filter
	var pos changefeed.Position
	gen, err := gens.LoadNewer(ctx, func(r io.Reader) error {
		var err error
		nf, pos, err = readSnapshot(r, fl.cfg.Identity, fl.cfg.MaxSnapshotBytes)
		return err
	})
	if err != nil {
		g.m.observeBuild("snapshot", g.cfg.Now().Sub(start), err)
		return fmt.Errorf("loading generation %d: %w", gen, err)
	}
	if nf == nil {
		return nil // nothing newer than what serves
	}
	g.m.observeBuild("snapshot", g.cfg.Now().Sub(start), nil)
	if seed := g.view.Load().seed; nf.Seed() != seed {
		return fmt.Errorf("generation %d hashes with another seed than the serving filter", gen)
	}
	fl.mu.Lock()
	g.cfg.Logger.Info("bloomgate: swapping in a newer filter beside the serving one", "generation", gen,
		"snapshot_position", pos, "serving_position", fl.pos)
	sw := &feedSwap{nf: nf, pos: pos, gen: gen, from: pos, start: start}
	fl.swap = sw
	if pos >= fl.pos {
		if pos == fl.pos {
			fl.swapLocked(sw)
		}
		fl.mu.Unlock() // else apply swaps it in when the stream reaches pos
		return nil
	}
	fl.mu.Unlock()
	err = gens.CatchUp(ctx, pos, func(t changefeed.Txn) error { return fl.catchUp(sw, t) })
	if errors.Is(err, errSwapped) || ctx.Err() != nil {
		return nil
	}
	if err == nil {
		err = errors.New("the catch-up ended")
	}
	return fmt.Errorf("catching generation %d up from %v: %w", gen, pos, err)
}

// catchUp applies a transaction from the catch-up to sw's filter, and swaps
// it in once it reaches the serving filter's position.
func (fl *follower) catchUp(sw *feedSwap, t changefeed.Txn) error {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.swap != sw {
		return errSwapped // replaced or dropped
	}
	if t.End > fl.pos {
		// No transaction ends between sw.pos and the serving filter's
		// position (t is the first after sw.pos): both hold the same ones.
		fl.swapLocked(sw)
		return errSwapped
	}
	fl.applyTo(sw.nf, fl.hashTxn(t), false)
	sw.pos = t.End
	if sw.pos == fl.pos {
		fl.swapLocked(sw)
		return errSwapped
	}
	return nil
}

// swapLocked makes sw's filter, which holds exactly the transactions the
// serving one holds (up to fl.pos), the serving filter. fl.mu is held.
func (fl *follower) swapLocked(sw *feedSwap) {
	g := fl.g
	fl.swap = nil
	if sw.refused {
		fl.failSwapLocked(sw, errors.New("the newer filter refused a key"))
		return
	}
	g.mu.Lock()
	fl.publishLocked(sw.nf, capacityOf(sw.nf), sw.gen)
	g.noteSwapLocked()
	g.mu.Unlock()
	if gens, ok := fl.feed.(Generations); ok {
		gens.Swapped(fl.pos, sw.gen)
	}
	g.cfg.Logger.Info("bloomgate: swapped in the newer filter", "generation", sw.gen, "position", fl.pos,
		"snapshot_position", sw.from, "capacity", capacityOf(sw.nf), "seconds", g.cfg.Now().Sub(sw.start).Seconds())
}

// failSwapLocked drops sw and ends the stream: Follow loads the newest
// snapshot as at a start. fl.mu is held.
func (fl *follower) failSwapLocked(sw *feedSwap, err error) {
	if fl.swap == sw {
		fl.swap = nil
	}
	if fl.swapFailed != nil {
		fl.g.cfg.Logger.Warn("bloomgate: the newer filter could not be swapped in beside the stream; failing open to load it", "err", err)
		fl.swapFailed(fmt.Errorf("%w: %w", errSwapFailed, err))
	}
}

// rebuildFailedLocked notes a failed rebuild: the next one waits a backoff
// (1 s, doubling to a minute) instead of starting at the next transaction,
// and the error is logged the first time, when it changes, and then at
// the 2nd, 4th, 8th… failure in a row, with the count.
func (fl *follower) rebuildFailedLocked(err error) {
	fl.failed++
	wait := min(time.Second<<min(fl.failed-1, 6), time.Minute)
	fl.rebuildAfter = fl.g.cfg.Now().Add(wait)
	msg := err.Error()
	if fl.failed&(fl.failed-1) == 0 || msg != fl.failedErr {
		fl.g.cfg.Logger.Error("bloomgate: rebuild from the change feed failed", "err", err,
			"failures_in_a_row", fl.failed, "retry_in", wait)
	}
	fl.failedErr = msg
}

// abandonPending drops a build's filter and restores the state it replaced.
func (g *Gate) abandonPending(nf Filter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.built != nf {
		return
	}
	g.endBuildLocked()
	if v := g.view.Load(); v.state == StateRebuilding {
		g.setStateLocked(StateReady, "")
	}
}

// snapshotLocked starts a snapshot of the serving filter at the applied
// position, unless one is being written. The filter is encoded now, with
// fl.mu held, so the snapshot holds exactly the transactions up to the
// position; writing it, and confirming the position once it is durable,
// happen beside the stream, bounded by SnapshotTimeout.
func (fl *follower) snapshotLocked() {
	if fl.cfg.Snapshots == nil {
		return
	}
	if fl.saving {
		return // a newer filter's (genPending) is taken at the next transaction after it
	}
	start, keys := fl.g.cfg.Now(), uint64(0)
	if v := fl.g.view.Load(); v.f != nil {
		keys = items(v.f)
	}
	data, pos, err := fl.encodeLocked()
	if err != nil {
		fl.g.cfg.Logger.Error("bloomgate: snapshot failed", "err", err)
		return
	}
	if data == nil {
		return
	}
	fl.genPending = false
	fl.saving = true
	fl.wg.Go(func() {
		err := fl.save(pos, data)
		if err != nil {
			fl.g.cfg.Logger.Error("bloomgate: snapshot failed; the feed keeps the unconfirmed transactions", "position", pos, "err", err)
		}
		fl.mu.Lock()
		fl.saving = false
		if err == nil {
			fl.saveDur, fl.saveKeys = fl.g.cfg.Now().Sub(start), keys
		}
		fl.mu.Unlock()
	})
}

// encodeLocked encodes the serving filter at the applied position. fl.mu is
// held. It returns nil data when there is nothing to snapshot.
func (fl *follower) encodeLocked() ([]byte, changefeed.Position, error) {
	if fl.pos < fl.heldBelow {
		// A rebuild's filter ahead of the stream holds transactions
		// after the applied position: a snapshot there would have them
		// applied twice from it (a delete twice: a false negative).
		// Taken once the stream reaches the copy's point.
		return nil, 0, nil
	}
	fl.lastSnapshot = fl.g.cfg.Now()
	v := fl.g.view.Load()
	if fl.cfg.Snapshots == nil || v.f == nil {
		return nil, 0, nil
	}
	fl.snapPos = fl.pos
	var buf bytes.Buffer
	if err := writeSnapshot(&buf, fl.cfg.Identity, fl.pos, v.f); err != nil {
		return nil, 0, err
	}
	return buf.Bytes(), fl.pos, nil
}

// save stores an encoded snapshot and confirms its position to the feed
// once it is durable, within SnapshotTimeout.
func (fl *follower) save(pos changefeed.Position, data []byte) error {
	ctx, cancel := context.WithTimeout(context.Background(), fl.cfg.SnapshotTimeout)
	defer cancel()
	err := fl.cfg.Snapshots.Save(ctx, pos, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return err
	}
	fl.g.m.snapshots.Add(1)
	if err := fl.feed.Confirm(ctx, pos); err != nil {
		return fmt.Errorf("bloomgate: snapshot at %v saved, but confirming it to the feed failed: %w", pos, err)
	}
	return nil
}
