package bloomgate

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

const progressEvery = 1 << 16

// Warm builds the first filter from the source and makes the gate ready. It is
// Rebuild under another name: calling it on a ready gate rebuilds.
func (g *Gate) Warm(ctx context.Context) error { return g.build(ctx, "warm") }

// Rebuild builds a fresh filter from the source while the current one keeps
// serving, then switches readers to it atomically. Keys added during the
// rebuild are in the new filter. If the build fails, a gate that was ready
// stays ready on its current filter; one that was not stays failing open.
func (g *Gate) Rebuild(ctx context.Context) error { return g.build(ctx, "rebuild") }

func (g *Gate) build(ctx context.Context, kind string) (err error) {
	g.buildMu.Lock()
	defer g.buildMu.Unlock()
	start := time.Now()
	defer func() {
		g.m.observeBuild(kind, time.Since(start), err)
		if err != nil {
			g.cfg.Logger.Error("bloomgate: build failed", "kind", kind, "err", err)
		}
	}()

	est, eerr := g.cfg.Source.Estimate(ctx)
	if eerr != nil {
		g.cfg.Logger.Warn("bloomgate: source estimate failed; sizing without it", "err", eerr)
		est = 0
	}
	capacity := g.cfg.Capacity
	if capacity == 0 {
		// A stale estimate (PostgreSQL's reltuples before ANALYZE) must not
		// size the new filter below what the current one already holds, or
		// the overfill trigger would rebuild it forever.
		n := float64(est)
		if v := g.view.Load(); v.f != nil {
			// Items counts duplicates, but the distinct estimate saturates
			// in an overfilled filter; over-sizing is the safe error.
			st := v.f.Stats()
			n = max(n, st.EstimatedDistinct, float64(st.Items))
		}
		capacity = max(1024, uint64(math.Ceil(1.5*n)))
	}
	nf, err := g.cfg.NewFilter(capacity, g.cfg.FPRate)
	if err != nil {
		return fmt.Errorf("bloomgate: new filter: %w", err)
	}

	// Install the new filter so adds from now on reach it, and replay the
	// recent adds of transactions the source's snapshot may not see.
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return ErrClosed
	}
	g.pending, g.pendingErr = nf, nil
	now := g.cfg.Now()
	for _, e := range g.journal {
		if now.Sub(e.at) <= g.cfg.RebuildOverlap {
			if err := nf.Add(e.key); err != nil {
				g.pendingErr = err
				break
			}
		}
	}
	unhonouredBefore := g.unhonoured
	if v := g.view.Load(); v.state == StateReady {
		g.setStateLocked(StateRebuilding, kind+" in progress")
	}
	g.mu.Unlock()

	var keys, skipped int64
	var buf []byte
	report := func(done bool) {
		if g.cfg.OnProgress != nil {
			g.cfg.OnProgress(Progress{Keys: keys, Estimate: est, Done: done})
		}
	}
	serr := g.cfg.Source.Scan(ctx, func(key []byte) error {
		buf = g.cfg.Normalizer.Append(buf[:0], key)
		if len(buf) > g.cfg.MaxKeyLen {
			skipped++ // always "maybe" at lookup time, so safe to leave out
			return nil
		}
		if err := nf.Add(buf); err != nil {
			return fmt.Errorf("filter refused key %d: %w", keys, err)
		}
		if keys++; keys%progressEvery == 0 {
			report(false)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
		return nil
	})
	report(true)

	g.mu.Lock()
	defer g.mu.Unlock()
	perr := g.pendingErr
	g.pending, g.pendingErr = nil, nil
	if serr == nil && perr != nil {
		serr = fmt.Errorf("filter refused a concurrent add: %w", perr)
	}
	if serr != nil {
		switch v := g.view.Load(); v.state {
		case StateRebuilding:
			g.setStateLocked(StateReady, "")
		case StateWarming, StateDegraded:
			if v.f == nil {
				g.setStateLocked(StateDegraded, fmt.Sprintf("%s failed: %v", kind, serr))
			}
		}
		return fmt.Errorf("bloomgate: %s: %w", kind, serr)
	}
	if g.closed {
		return ErrClosed
	}
	nv := &view{state: StateReady, f: nf, builtAt: g.cfg.Now()}
	if hl, ok := nf.(hashLookup); ok {
		nv.hl, nv.seed = hl, hl.Seed()
	}
	g.view.Store(nv)
	// Removes made during the build may still be in the new filter.
	g.unhonoured -= unhonouredBefore
	g.m.builds.Add(1)
	g.cfg.Logger.Info("bloomgate: filter built", "kind", kind, "keys", keys, "skipped_long_keys", skipped,
		"capacity", capacity, "seconds", time.Since(start).Seconds())
	return nil
}

// Run warms the gate and keeps it fresh until ctx is done: it retries failed
// builds with backoff (failing open meanwhile), and rebuilds on schedule
// (RebuildInterval), when the filter is overfilled (estimated FP rate above
// OverfillFactor × FPRate), when unhonoured removes pile up, and when the gate
// is degraded. It returns ctx's error.
func (g *Gate) Run(ctx context.Context) error {
	backoff := time.Second
	for {
		var wait time.Duration
		if reason := g.rebuildReason(); reason != "" {
			g.cfg.Logger.Info("bloomgate: building", "reason", reason)
			if err := g.build(ctx, buildKind(g)); err != nil {
				if errors.Is(err, ErrClosed) {
					return err
				}
				wait, backoff = backoff, min(2*backoff, time.Minute)
			} else {
				backoff = time.Second
			}
		}
		if wait == 0 {
			wait = g.cfg.CheckInterval
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func buildKind(g *Gate) string {
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
	u := g.unhonoured
	g.mu.Unlock()
	if u > 0 && float64(u) > g.cfg.RemoveRebuildRatio*float64(max(st.Items, 1)) {
		return fmt.Sprintf("%d removes the filter could not honour", u)
	}
	return ""
}
