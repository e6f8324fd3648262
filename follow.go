package bloomgate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Feed is a change feed with exact positions, such as PostgreSQL logical
// replication (source/postgres.Feed). Rebuild and Confirm may run while
// Stream does; no two Streams run at once.
type Feed interface {
	// Bootstrap starts the feed afresh: it calls fn for every key of the
	// table at one consistent point and returns that point. Stream from it
	// delivers exactly the transactions the keys do not reflect.
	Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error)
	// Rebuild is Bootstrap while a Stream goes on: the keys reflect exactly
	// the transactions with Txn.Commit below the returned point.
	Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error)
	// Stream calls apply, in order, for every committed transaction after
	// from, and with progress markers (Txns without changes). An error
	// wrapping changefeed.ErrRebuild means from cannot be resumed.
	Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error
	// Head returns the position of the newest committed transaction now.
	Head(ctx context.Context) (changefeed.Position, error)
	// Confirm tells the feed that every transaction up to pos is durable
	// on the gate's side, so it may release them.
	Confirm(ctx context.Context, pos changefeed.Position) error
}

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
	// one is also taken after every rebuild and when Follow returns.
	// Default: 1 minute.
	SnapshotInterval time.Duration
	// MaxLag bounds staleness: the gate answers "absent" only while every
	// transaction committed more than MaxLag ago has been applied, and
	// fails open otherwise (a stalled or disconnected feed, a backlog).
	// Default: 30 s.
	MaxLag time.Duration
	// MaxSnapshotBytes bounds the memory a loaded snapshot's filter may
	// take. Default: package filter's decoding default.
	MaxSnapshotBytes uint64
}

// Defaults of FollowConfig's fields.
const (
	DefaultSnapshotInterval = time.Minute
	DefaultMaxLag           = 30 * time.Second
)

// feedReason prefixes the reasons Follow fails open for, so that it can
// clear them itself without clearing the application's Degrade.
const feedReason = "change feed: "

// Follow keeps the gate in step with a change feed until ctx is done, and
// returns ctx's error (or ErrClosed). It replaces Run: every row any writer
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
// (schedule, overfill, the degraded state) and when deletes pile up that
// the filter could not apply.
func (g *Gate) Follow(ctx context.Context, feed Feed, cfg FollowConfig) error {
	defaults.Set(&cfg.SnapshotInterval, DefaultSnapshotInterval)
	defaults.Set(&cfg.MaxLag, DefaultMaxLag)
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
	fresh := false
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: 30 * time.Second}
	for {
		fl := &follower{g: g, feed: feed, cfg: cfg}
		err := fl.run(ctx, fresh)
		fl.mu.Lock()
		applied := fl.applied
		fl.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if errors.Is(err, ErrClosed) {
			return err
		}
		fresh = errors.Is(err, changefeed.ErrRebuild)
		g.cfg.Logger.Warn("bloomgate: change feed failed; failing open and restarting", "err", err, "bootstrap", fresh)
		g.degradeFeed(fmt.Sprintf("%v", err))
		if err := retry.Wait(ctx); err != nil {
			return err
		}
		if applied > 0 {
			retry.Reset()
		}
	}
}

// degradeFeed fails open for a reason of the feed's.
func (g *Gate) degradeFeed(reason string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.view.Load(); v.state != StateDegraded || strings.HasPrefix(v.reason, feedReason) {
		g.setStateLocked(StateDegraded, feedReason+reason)
	}
}

// follower is one run of Follow: from a snapshot or bootstrap to the end of
// a stream.
type follower struct {
	g    *Gate
	feed Feed
	cfg  FollowConfig

	mu           sync.Mutex // serialises applying, snapshots and the rebuild's swap
	pos          changefeed.Position
	applied      int64
	heads        []headMark // feed heads seen, oldest first
	caughtUp     bool
	lastSnapshot time.Time
	lastCheck    time.Time
	unknown      uint64 // deletes the serving filter could not apply
	rebuild      *feedRebuild
	rebuildWhy   string
}

type headMark struct {
	at  time.Time
	pos changefeed.Position
}

type feedRebuild struct {
	nf     Filter
	buf    []hashedTxn // transactions applied while its snapshot ran
	cancel context.CancelFunc
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
		return err
	}
	sctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { fl.watch(sctx) })
	err := fl.feed.Stream(sctx, fl.pos, fl.apply)
	cancel()
	wg.Wait()
	fl.mu.Lock()
	if rb := fl.rebuild; rb != nil {
		fl.rebuild = nil
		rb.cancel()
		g.abandonPending(rb.nf)
	}
	if ctx.Err() != nil && fl.cfg.Snapshots != nil {
		// On shutdown: a last snapshot, so the next start catches up little.
		sctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if serr := fl.snapshot(sctx); serr != nil {
			g.cfg.Logger.Error("bloomgate: snapshot on shutdown failed", "err", serr)
		}
		cancel()
	}
	fl.mu.Unlock()
	return err
}

// load installs the newest valid snapshot as the gate's filter, failing open
// until the stream catches up.
func (fl *follower) load(ctx context.Context) bool {
	g := fl.g
	start := time.Now()
	var f Filter
	var pos changefeed.Position
	err := fl.cfg.Snapshots.Load(ctx, func(r io.Reader) error {
		var err error
		f, pos, err = readSnapshot(r, fl.cfg.Identity, fl.cfg.MaxSnapshotBytes)
		if err != nil {
			g.cfg.Logger.Warn("bloomgate: skipping snapshot", "err", err)
		}
		return err
	})
	if err != nil {
		g.cfg.Logger.Info("bloomgate: no usable snapshot; bootstrapping", "err", err)
		return false
	}
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.building {
		return false
	}
	g.seed = f.Seed()
	g.journal = newJournal(g.cfg.RebuildOverlap) // its hashes used the old seed
	fl.publishLocked(f)
	fl.pos = pos
	g.cfg.Logger.Info("bloomgate: snapshot loaded", "position", pos, "seconds", time.Since(start).Seconds())
	return true
}

// publishLocked makes f the serving filter, authoritative only if the
// follower has caught up. g.mu is held.
func (fl *follower) publishLocked(f Filter) {
	g := fl.g
	nv := &view{state: StateReady, f: f, seed: f.Seed(), followed: true, snapshotAt: g.cfg.Now(), builtAt: g.cfg.Now()}
	nv.rm, _ = f.(Remover)
	switch {
	case g.closed:
		nv.state, nv.reason = StateDegraded, "closed"
	case !fl.caughtUp:
		nv.state, nv.reason = StateDegraded, feedReason+"catching up"
	}
	g.publishLocked(nv)
	g.unapplied = 0
	fl.unknown = 0
}

// bootstrap builds a filter from the feed's fresh snapshot, sized from
// Config.Source's estimate; a filter that fills up is started over twice as
// large.
func (fl *follower) bootstrap(ctx context.Context) error {
	g := fl.g
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	start := time.Now()
	capacity := g.capacity(g.estimate(ctx))
	for {
		nf, err := g.newFilter(capacity)
		if err != nil {
			return err
		}
		var keys int64
		pos, err := fl.feed.Bootstrap(ctx, func(key []byte) error {
			keys++
			return fl.addKey(nf, key)
		})
		if errors.Is(err, filter.ErrFull) && capacity < 1<<40 {
			capacity *= 2
			continue
		}
		g.m.observeBuild("bootstrap", time.Since(start), err)
		if err != nil {
			return fmt.Errorf("bloomgate: bootstrap: %w", err)
		}
		g.mu.Lock()
		fl.publishLocked(nf)
		g.m.builds.Add(1)
		g.mu.Unlock()
		fl.mu.Lock()
		fl.pos = pos
		fl.snapshotOrLog(ctx)
		fl.mu.Unlock()
		g.cfg.Logger.Info("bloomgate: filter bootstrapped from the change feed", "keys", keys, "position", pos,
			"capacity", capacity, "seconds", time.Since(start).Seconds())
		return nil
	}
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
// transaction committed before now has been applied.
func (fl *follower) markHead(ctx context.Context) error {
	at := time.Now()
	head, err := fl.feed.Head(ctx)
	if err != nil {
		return fmt.Errorf("bloomgate: feed head: %w", err)
	}
	fl.mu.Lock()
	fl.heads = append(fl.heads, headMark{at, head})
	fl.updateLocked(time.Now())
	fl.mu.Unlock()
	return nil
}

// watch marks the head regularly, so a stalled stream turns the gate not
// ready within about MaxLag.
func (fl *follower) watch(ctx context.Context) {
	every := min(max(fl.cfg.MaxLag/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := fl.markHead(ctx); err != nil {
			fl.mu.Lock()
			fl.updateLocked(time.Now())
			fl.mu.Unlock()
		}
	}
}

// lagLocked returns how far the applied position is behind: the age of the
// newest head mark it has passed (a mark not yet passed is outstanding).
func (fl *follower) lagLocked(now time.Time) (time.Duration, bool) {
	passed := -1
	for i, h := range fl.heads {
		if h.pos <= fl.pos {
			passed = i
		}
	}
	if passed < 0 {
		return 0, false
	}
	// Marks before the newest passed one are no longer needed.
	fl.heads = fl.heads[passed:]
	return now.Sub(fl.heads[0].at), true
}

// updateLocked turns the gate ready or failing open by the feed's lag.
func (fl *follower) updateLocked(now time.Time) {
	g := fl.g
	lag, ok := fl.lagLocked(now)
	fresh := ok && lag <= fl.cfg.MaxLag
	g.m.feedLag.Store(int64(lag))
	g.m.feedPosition.Store(uint64(fl.pos))
	if fresh {
		fl.caughtUp = true
		g.freshUntil.Store(monoNow() + int64(fl.cfg.MaxLag-lag))
	}
	change := func(v *view) bool {
		ours := v.state == StateDegraded && strings.HasPrefix(v.reason, feedReason)
		return v.f != nil && (fresh && ours || !fresh && v.authoritative() && fl.caughtUp)
	}
	if !change(g.view.Load()) {
		return // the common case, without the gate's lock
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if v := g.view.Load(); !change(v) {
		return
	} else if fresh {
		g.setStateLocked(StateReady, "")
	} else {
		g.setStateLocked(StateDegraded, fmt.Sprintf("%slag %v exceeds MaxLag %v", feedReason, lag.Round(time.Millisecond), fl.cfg.MaxLag))
	}
}

// apply applies one transaction from the stream.
func (fl *follower) apply(t changefeed.Txn) error {
	g := fl.g
	fl.mu.Lock()
	defer fl.mu.Unlock()
	ht := fl.hashTxn(t)
	v := g.view.Load()
	if v.f != nil {
		fl.applyTo(v.f, ht, true)
	}
	if rb := fl.rebuild; rb != nil {
		rb.buf = append(rb.buf, ht)
	}
	fl.pos = t.End
	fl.applied++
	now := time.Now()
	fl.updateLocked(now)
	if fl.cfg.Snapshots != nil && now.Sub(fl.lastSnapshot) >= fl.cfg.SnapshotInterval && fl.rebuild == nil {
		fl.snapshotOrLog(context.Background())
	} else if fl.cfg.Snapshots == nil {
		fl.feed.Confirm(context.Background(), fl.pos)
	}
	if now.Sub(fl.lastCheck) >= g.cfg.CheckInterval && fl.rebuild == nil {
		fl.lastCheck = now
		if why := fl.rebuildReasonLocked(); why != "" {
			fl.startRebuildLocked(why)
		}
	}
	return nil
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

// applyTo applies a transaction to f: its adds first, so a key deleted and
// inserted again in one transaction is never absent, then its removes where
// f can remove.
func (fl *follower) applyTo(f Filter, t hashedTxn, serving bool) {
	g := fl.g
	for _, h := range t.adds {
		if err := f.AddHash(h); err != nil {
			if serving {
				g.Degrade(fmt.Sprintf("filter refused a key from the change feed: %v", err))
			} else if rb := fl.rebuild; rb != nil && rb.nf == f {
				fl.rebuildWhy = "refused"
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
			fl.rebuildWhy = "table truncated"
		}
	}
}

// rebuildReasonLocked says why the filter should be rebuilt from the feed.
func (fl *follower) rebuildReasonLocked() string {
	g := fl.g
	if fl.rebuildWhy != "" {
		return fl.rebuildWhy
	}
	v := g.view.Load()
	switch {
	case v.f == nil:
		return ""
	case v.state == StateDegraded && !strings.HasPrefix(v.reason, feedReason):
		return "degraded: " + v.reason
	case g.cfg.RebuildInterval > 0 && g.cfg.Now().Sub(v.builtAt) >= g.cfg.RebuildInterval:
		return "schedule"
	}
	st := v.f.Stats()
	if st.EstimatedFPRate > g.cfg.OverfillFactor*g.cfg.FPRate {
		return fmt.Sprintf("overfilled: estimated FP %.4g", st.EstimatedFPRate)
	}
	if fl.unknown > 0 && float64(fl.unknown) > g.cfg.RemoveRebuildRatio*float64(max(st.Items, 1)) {
		return fmt.Sprintf("%d deletes the filter could not apply", fl.unknown)
	}
	return ""
}

// startRebuildLocked builds a new filter from the feed's Rebuild while the
// stream goes on; transactions applied meanwhile are kept and replayed into
// it from its point on.
func (fl *follower) startRebuildLocked(why string) {
	g := fl.g
	fl.rebuildWhy = ""
	nf, err := g.newFilter(g.capacity(0))
	if err != nil {
		g.cfg.Logger.Error("bloomgate: rebuild from the change feed", "err", err)
		return
	}
	if _, _, err := g.install(nf, "rebuild", false); err != nil {
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	rb := &feedRebuild{nf: nf, cancel: cancel}
	fl.rebuild = rb
	g.cfg.Logger.Info("bloomgate: rebuilding from the change feed", "reason", why)
	go func() {
		defer cancel()
		start := time.Now()
		var keys int64
		pos, err := fl.feed.Rebuild(ctx, func(key []byte) error {
			keys++
			return fl.addKey(nf, key)
		})
		g.m.observeBuild("rebuild", time.Since(start), err)
		fl.mu.Lock()
		defer fl.mu.Unlock()
		if fl.rebuild != rb {
			return // the run ended
		}
		fl.rebuild = nil
		if err != nil {
			g.cfg.Logger.Error("bloomgate: rebuild from the change feed failed", "err", err)
			g.abandonPending(nf)
			return
		}
		for _, t := range rb.buf {
			if t.commit >= pos {
				fl.applyTo(nf, t, false)
			}
		}
		if fl.rebuildWhy == "refused" {
			g.abandonPending(nf)
			fl.rebuildWhy = "the new filter refused a key"
			return
		}
		g.mu.Lock()
		g.endBuildLocked()
		fl.publishLocked(nf)
		g.m.builds.Add(1)
		g.mu.Unlock()
		// Keep the rebuilt filter's later transactions flowing to it: it is
		// the serving filter now. Snapshot it at once.
		fl.snapshotOrLog(context.Background())
		g.cfg.Logger.Info("bloomgate: filter rebuilt from the change feed", "keys", keys, "position", pos,
			"seconds", time.Since(start).Seconds())
	}()
}

// abandonPending drops a build's filter and restores the state it replaced.
func (g *Gate) abandonPending(nf Filter) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pending != nf {
		return
	}
	g.endBuildLocked()
	if v := g.view.Load(); v.state == StateRebuilding {
		g.setStateLocked(StateReady, "")
	}
}

// snapshotOrLog takes a snapshot and logs a failure: the gate goes on, and
// the feed keeps the unconfirmed transactions.
func (fl *follower) snapshotOrLog(ctx context.Context) {
	if err := fl.snapshot(ctx); err != nil {
		fl.g.cfg.Logger.Error("bloomgate: snapshot failed", "err", err)
	}
}

// snapshot writes the serving filter at the applied position and confirms
// the position to the feed once it is durable. fl.mu is held, so no
// transaction is applied meanwhile.
func (fl *follower) snapshot(ctx context.Context) error {
	fl.lastSnapshot = time.Now()
	v := fl.g.view.Load()
	if fl.cfg.Snapshots == nil || v.f == nil {
		return nil
	}
	pos := fl.pos
	err := fl.cfg.Snapshots.Save(ctx, pos, func(w io.Writer) error {
		return writeSnapshot(w, fl.cfg.Identity, pos, v.f)
	})
	if err != nil {
		return err
	}
	fl.g.m.snapshots.Add(1)
	return fl.feed.Confirm(ctx, pos)
}
