package fanouttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// OutageConfig describes a feeder-outage run (Outage).
type OutageConfig struct {
	PG *PG
	// Instances are the gates that follow the set as instances.
	Instances []*bloomgate.Gate
	// StartFeeder starts a feeder of the set (a new gate, loading the
	// feeder's newest snapshot); stop ends it without a word to instances.
	StartFeeder func() (stop func())
	// Feeders running at the start, stopped in the first cycle.
	Feeders []func()
	// Bound: a row committed more than Bound before a lookup must be
	// answered "maybe" (the instances' MaxLag).
	Bound time.Duration
	// Down is how long every feeder stays down in each cycle (past the
	// instances' HeadTimeout + MaxLag).
	Down time.Duration
	// Up is how long each cycle runs after one feeder is back.
	Up     time.Duration
	Cycles int
}

// OutageCycles is how many outages a test runs: five with
// BLOOMGATE_LONG=1 (as CI runs), two otherwise.
func OutageCycles() int {
	if testsvc.IsLong() {
		return 5
	}
	return 2
}

// Outage writes rows without pause while, Cycles times, every feeder
// stops for Down and then one starts again (from the feeder's newest
// snapshot, so it catches up through the feed); it checks every instance
// all along, through the outage and the whole catch-up: no row committed
// more than Bound before a lookup may be answered "absent". At the end of
// each cycle every instance must be ready again and hold every row.
func Outage(t *testing.T, cfg OutageConfig) {
	t.Helper()
	type row struct {
		key string
		at  time.Time // after the commit returned
	}
	var mu sync.Mutex
	var rows []row
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	// ~1,000 rows/s in transactions of 10, so that a restarted feeder has a
	// backlog to catch up.
	wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			prefix := fmt.Sprintf("o%d-", n)
			if _, err := cfg.PG.InsertMany(ctx, prefix, 10); err != nil {
				continue
			}
			now := time.Now()
			mu.Lock()
			for i := range 10 {
				rows = append(rows, row{fmt.Sprintf("%s%d@x", prefix, i), now})
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	})
	var fnMu sync.Mutex
	fn, checked := 0, 0
	for i, g := range cfg.Instances {
		wg.Go(func() {
			for ctx.Err() == nil {
				mu.Lock()
				all := rows
				mu.Unlock()
				n := 0
				for _, r := range all {
					age := time.Since(r.at)
					if age <= cfg.Bound {
						break // rows are in commit order
					}
					n++
					ready := g.Ready()
					if !g.MayContain([]byte(r.key)) {
						_, reason := g.State()
						fnMu.Lock()
						fn++
						if fn <= 5 {
							t.Errorf("FALSE NEGATIVE: instance %d: %q committed %v ago answered absent (ready before the lookup %v, position %v, reason %q)",
								i, r.key, age.Round(time.Millisecond), ready, g.Position(), reason)
						}
						fnMu.Unlock()
					}
				}
				fnMu.Lock()
				checked += n
				fnMu.Unlock()
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
	feeders := cfg.Feeders
	for c := range cfg.Cycles {
		for _, s := range feeders {
			s()
		}
		time.Sleep(cfg.Down)
		restarted := time.Now()
		feeders = []func(){cfg.StartFeeder()}
		mu.Lock()
		last := rows[len(rows)-1]
		mu.Unlock()
		var took []string
		for i, g := range cfg.Instances {
			deadline := restarted.Add(HealWithin)
			for !(g.Ready() && g.MayContain([]byte(last.key))) {
				if time.Now().After(deadline) {
					_, reason := g.State()
					t.Fatalf("cycle %d: instance %d not ready with the row %q %v after the feeder's restart: %s", c, i, last.key, HealWithin, reason)
				}
				time.Sleep(5 * time.Millisecond)
			}
			took = append(took, time.Since(restarted).Round(time.Millisecond).String())
		}
		t.Logf("cycle %d: instances ready and holding the last row written before the restart after %v", c, took)
		time.Sleep(time.Until(restarted.Add(cfg.Up)))
	}
	stop()
	wg.Wait()
	for _, s := range feeders {
		s()
	}
	t.Logf("%d rows written, %d lookups of rows older than %v, %d false negatives", len(rows), checked, cfg.Bound, fn)
}
