package bloomgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/backoff"
)

const progressEvery = 1 << 16

// A PartitionedSource is a Source that can also stream its keys as several
// parts at once (changefeed.PartitionedSource).
type PartitionedSource = changefeed.PartitionedSource

// Warm builds the first filter from the source and makes the gate ready. It is
// Rebuild under another name: calling it on a ready gate rebuilds.
func (g *Gate) Warm(ctx context.Context) error { return g.build(ctx, "warm") }

// Rebuild builds a fresh filter from the source while the current one keeps
// serving, then switches readers to it atomically. Keys added during the
// rebuild are in the new filter. If the build fails, a gate that was ready
// stays ready on its current filter; one that was not stays failing open.
func (g *Gate) Rebuild(ctx context.Context) error { return g.build(ctx, "rebuild") }

// A build: size a new filter, install it so every Add from then on reaches
// it, replay the adds of the last RebuildOverlap (transactions the source's
// snapshot may not see), scan the source into it, and publish it.
func (g *Gate) build(ctx context.Context, kind string) (err error) {
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	g.mu.Lock()
	following := g.following
	g.mu.Unlock()
	if following {
		return ErrFollowing
	}
	if g.cfg.Source == nil {
		return fmt.Errorf("%w: %s needs Config.Source", ErrInvalidConfig, kind)
	}
	start := time.Now()
	defer func() {
		g.m.observeBuild(kind, time.Since(start), err)
		if err != nil {
			g.cfg.Logger.Error("bloomgate: build failed", "kind", kind, "err", err)
		}
	}()

	est := g.estimate(ctx)
	capacity := g.capacity(est)
	for attempt := 1; ; attempt++ {
		nf, err := g.newFilter(capacity)
		if err != nil {
			return err
		}
		// A Bloom filter is built with plain writes from this goroutine alone;
		// adds made meanwhile are buffered and applied when it finishes.
		add := func(hs []uint64) error {
			for _, h := range hs {
				if err := nf.AddHash(h); err != nil {
					return err
				}
			}
			return nil
		}
		bb := (*filter.BloomBuilder)(nil)
		if b, ok := nf.(*filter.Bloom); ok {
			bb = b.Builder()
			add = func(hs []uint64) error { bb.AddHashMany(hs); return nil }
		}
		snapshotAt, recent, err := g.install(nf, kind, bb != nil)
		if err != nil {
			return err
		}
		serr := replay(add, recent)
		var keys, skipped int64
		if serr == nil {
			keys, skipped, serr = g.scan(ctx, add, est)
		}
		full := errors.Is(serr, filter.ErrFull) || serr == nil && uint64(keys) > capacity
		if full && g.cfg.Capacity == 0 && attempt < maxSizingAttempts {
			// The estimate was short (statistics from before the table
			// was filled): this filter would serve above its rate, or
			// could not hold the table. Scan again into one sized for
			// what the scan read, before publishing.
			next := max(g.capacity(keys), capacity+1)
			if serr != nil {
				next = max(next, 2*capacity)
			}
			g.cfg.Logger.Info("bloomgate: the source holds more keys than the filter was sized for; building again",
				"kind", kind, "keys", keys, "capacity", capacity, "new_capacity", next)
			g.abandonPending(nf)
			capacity, est = next, keys
			continue
		}
		if err := g.finish(nf, bb, kind, snapshotAt, serr); err != nil {
			return err
		}
		g.cfg.Logger.Info("bloomgate: filter built", "kind", kind, "keys", keys, "skipped_long_keys", skipped,
			"capacity", capacity, "seconds", time.Since(start).Seconds())
		return nil
	}
}

// maxSizingAttempts bounds the scans of one build whose filter turned out
// too small for the source.
const maxSizingAttempts = 4

// estimate returns the source's estimate of its keys, 0 if unknown.
func (g *Gate) estimate(ctx context.Context) int64 {
	est, err := g.cfg.Source.Estimate(ctx)
	if err != nil {
		if ctx.Err() == nil { // not when the build is being cancelled
			g.cfg.Logger.Warn("bloomgate: source estimate failed; sizing without it", "err", err)
		}
		return 0
	}
	return est
}

// capacity sizes the next filter: Config.Capacity, or the estimate plus
// headroom. A stale estimate (PostgreSQL's reltuples before ANALYZE) must not
// size the new filter below what the current one already holds, or the
// overfill trigger would rebuild it forever.
func (g *Gate) capacity(est int64) uint64 {
	if g.cfg.Capacity != 0 {
		return g.cfg.Capacity
	}
	n := float64(est)
	if v := g.view.Load(); v.f != nil {
		// Items counts duplicates, but the distinct estimate saturates
		// in an overfilled filter; over-sizing is the safe error.
		st := v.f.Stats()
		n = max(n, st.EstimatedDistinct, float64(st.Items))
	}
	return max(1024, uint64(math.Ceil((1+g.cfg.Headroom)*n)))
}

func (g *Gate) newFilter(capacity uint64) (Filter, error) {
	nf, err := g.cfg.NewFilter(capacity, g.cfg.FPRate, g.seed)
	if err != nil {
		return nil, fmt.Errorf("bloomgate: new filter: %w", err)
	}
	if nf == nil {
		return nil, errors.New("bloomgate: new filter: NewFilter returned nil")
	}
	if s := nf.Seed(); s != g.seed {
		return nil, fmt.Errorf("bloomgate: new filter: seed %#x, want the gate's %#x", s, g.seed)
	}
	return nf, nil
}

// install makes nf the filter every Add also reaches (at once, or when the
// build finishes if buffered), and returns the time it did and the recent
// adds to replay into it.
func (g *Gate) install(nf Filter, kind string, buffered bool) (time.Time, []journalSegment, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return time.Time{}, nil, ErrClosed
	}
	if g.building {
		return time.Time{}, nil, ErrBuilding
	}
	g.building, g.built, g.pendingErr, g.pendingUnapplied = true, nf, nil, 0
	if buffered {
		g.buffering, g.pendingBuf = true, nil
	} else {
		g.pending = nf
	}
	if v := g.view.Load(); v.state == StateReady {
		g.setStateLocked(StateRebuilding, kind+" in progress")
	}
	return g.cfg.Now(), g.journal.recent(), nil
}

// replay adds the journal's recent hashes to the new filter. Adds made since
// install reach it directly, or from the buffer.
func replay(add func([]uint64) error, recent []journalSegment) error {
	for _, seg := range recent {
		if err := add(seg.hashes); err != nil {
			return fmt.Errorf("filter refused a replayed add: %w", err)
		}
	}
	return nil
}

// scan adds every key of the source to nf, skipping those longer than
// MaxKeyLen (always "maybe" at lookup time, so safe to leave out).
func (g *Gate) scan(ctx context.Context, add func([]uint64) error, est int64) (keys, skipped int64, err error) {
	report := func(done bool) {
		if g.cfg.OnProgress != nil {
			g.cfg.OnProgress(Progress{Keys: keys, Estimate: est, Done: done})
		}
	}
	// Keys are added in groups, so a filter that can overlap their cache
	// misses does (filter.BloomBuilder.AddHashMany).
	var group [256]uint64
	n := 0
	flush := func() error {
		err := add(group[:n])
		n = 0
		if err != nil {
			return fmt.Errorf("filter refused one of keys %d to %d: %w", keys-int64(len(group)), keys, err)
		}
		return nil
	}
	if ps, ok := g.cfg.Source.(PartitionedSource); ok && ps.Parts() > 1 {
		keys, skipped, err = g.scanParts(ctx, ps, add, func() { report(false) }, &keys)
		report(true)
		return keys, skipped, err
	}
	err = g.cfg.Source.Scan(ctx, func(key []byte) error {
		h, err := g.hash(key, g.seed) // builds hold buildMu: the seed cannot change
		if err != nil {
			skipped++
			return nil
		}
		group[n] = h
		keys++
		if n++; n == len(group) {
			if err := flush(); err != nil {
				return err
			}
		}
		if keys%progressEvery == 0 {
			report(false)
			return ctx.Err()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	report(true)
	return keys, skipped, err
}

// scanParts is scan over a PartitionedSource: each part hashes its keys into
// batches of its own, and this goroutine adds the batches to the filter.
// keys is updated as batches are added, for progress.
func (g *Gate) scanParts(ctx context.Context, ps PartitionedSource, add func([]uint64) error, progress func(), keys *int64) (_, skipped int64, err error) {
	const batchLen = 1024
	parts := ps.Parts()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	full := make(chan []uint64, 2*parts)
	free := make(chan []uint64, 4*parts)
	skips := make([]int64, parts)
	var serr error
	go func() {
		defer close(full)
		cur := make([][]uint64, parts)
		serr = ps.ScanParts(ctx, func(part int, key []byte) error {
			if part < 0 || part >= parts {
				return fmt.Errorf("source reported part %d of %d", part, parts)
			}
			h, err := g.hash(key, g.seed) // builds hold buildMu: the seed cannot change
			if err != nil {
				skips[part]++
				return nil
			}
			b := cur[part]
			if b == nil {
				select {
				case b = <-free:
				default:
					b = make([]uint64, 0, batchLen)
				}
			}
			if b = append(b, h); len(b) == batchLen {
				select {
				case full <- b:
				case <-ctx.Done():
					return ctx.Err()
				}
				b = nil
			}
			cur[part] = b
			return nil
		})
		for _, b := range cur { // ScanParts has returned: no part runs
			if len(b) > 0 && serr == nil {
				select {
				case full <- b:
				case <-ctx.Done():
				}
			}
		}
	}()
	next := int64(progressEvery)
	for b := range full {
		if err != nil {
			continue // drain until the scan stops
		}
		if aerr := add(b); aerr != nil {
			err = fmt.Errorf("filter refused one of keys %d to %d: %w", *keys, *keys+int64(len(b)), aerr)
			cancel()
			continue
		}
		if *keys += int64(len(b)); *keys >= next {
			next += progressEvery
			progress()
		}
		select {
		case free <- b[:0]:
		default:
		}
	}
	for _, n := range skips {
		skipped += n
	}
	if err == nil {
		err = serr
	}
	return *keys, skipped, err
}

// finish ends a build: on success it publishes nf as the serving filter; on
// failure the gate keeps serving what it had, or fails open if it had
// nothing.
func (g *Gate) finish(nf Filter, bb *filter.BloomBuilder, kind string, snapshotAt time.Time, serr error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if serr == nil && g.pendingErr != nil {
		serr = fmt.Errorf("filter refused a concurrent add: %w", g.pendingErr)
	}
	if bb != nil {
		for _, h := range g.pendingBuf {
			bb.AddHash(h)
		}
		bb.Finish() // published below by the view's atomic store
	}
	unapplied := g.pendingUnapplied
	g.endBuildLocked()
	if serr == nil && g.closed {
		serr = ErrClosed
	}
	if serr != nil {
		switch v := g.view.Load(); {
		case v.state == StateRebuilding:
			g.setStateLocked(StateReady, "")
		case v.f == nil:
			g.setStateLocked(StateDegraded, fmt.Sprintf("%s failed: %v", kind, serr))
		}
		if errors.Is(serr, ErrClosed) {
			return serr
		}
		return fmt.Errorf("bloomgate: %s: %w", kind, serr)
	}
	nv := &view{state: StateReady, f: nf, seed: g.seed, snapshotAt: snapshotAt, builtAt: g.cfg.Now(), gen: g.m.builds.Add(1)}
	nv.rm, _ = nf.(Remover)
	if g.view.Load().f != nil {
		g.noteSwapLocked()
	}
	g.publishLocked(nv)
	g.unapplied = unapplied // removes made during the build never reached nf
	return nil
}

// endBuildLocked clears a build's state. g.mu is held.
func (g *Gate) endBuildLocked() {
	g.building, g.built, g.pending, g.pendingErr, g.pendingUnapplied = false, nil, nil, nil, 0
	g.buffering, g.pendingBuf = false, nil
}

// Run warms the gate and keeps it fresh until ctx is done: it retries failed
// builds with backoff (failing open meanwhile), and rebuilds on schedule
// (RebuildInterval), when the filter is overfilled (estimated FP rate above
// OverfillFactor × FPRate), when unapplied removes pile up, and when the gate
// is degraded. It returns ctx's error, ErrClosed once the gate is closed, or
// ErrFollowing if the gate follows a change feed (see Follow).
func (g *Gate) Run(ctx context.Context) error {
	if g.cfg.Source == nil {
		return fmt.Errorf("%w: Run needs Config.Source", ErrInvalidConfig)
	}
	retry := backoff.Backoff{Min: time.Second, Max: time.Minute}
	for {
		var wait time.Duration
		if reason := g.rebuildReason(); reason != "" {
			g.cfg.Logger.Info("bloomgate: building", "reason", reason)
			if err := g.build(ctx, g.buildKind()); err != nil {
				if errors.Is(err, ErrClosed) || errors.Is(err, ErrFollowing) {
					return err
				}
				wait = retry.Next()
			} else {
				retry.Reset()
			}
		}
		if wait == 0 {
			wait = g.cfg.CheckInterval
		}
		if err := backoff.Sleep(ctx, wait); err != nil {
			return err
		}
	}
}

func (g *Gate) buildKind() string {
	if g.view.Load().f == nil {
		return "warm"
	}
	return "rebuild"
}

// rebuildReason says why the filter should be rebuilt now, or "".
func (g *Gate) rebuildReason() string {
	v := g.view.Load()
	switch {
	case v.f == nil:
		return "no filter"
	case v.state == StateDegraded:
		return "degraded: " + v.reason
	case g.cfg.RebuildInterval > 0 && g.cfg.Now().Sub(v.builtAt) >= g.cfg.RebuildInterval:
		return "schedule"
	}
	st := v.f.Stats()
	if st.EstimatedFPRate > g.cfg.OverfillFactor*g.cfg.FPRate {
		return fmt.Sprintf("overfilled: estimated FP %.4g > %g × %g", st.EstimatedFPRate, g.cfg.OverfillFactor, g.cfg.FPRate)
	}
	g.mu.Lock()
	u := g.unapplied
	g.mu.Unlock()
	if u > 0 && float64(u) > g.cfg.RemoveRebuildRatio*float64(max(st.Items, 1)) {
		return fmt.Sprintf("%d removes the filter did not apply", u)
	}
	return ""
}
