package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// followGate starts Gate.Follow over feed and waits until it is ready.
func followGate(t *testing.T, fx *feedFixture, feed *postgres.Feed, fcfg bloomgate.FollowConfig) (*bloomgate.Gate, func()) {
	t.Helper()
	src, err := postgres.New(postgres.Config{Pool: fx.pool, Table: fx.table, Column: "email"})
	if err != nil {
		t.Fatal(err)
	}
	g, err := bloomgate.New(bloomgate.Config{Source: src, NewFilter: bloomgate.NewCuckoo, FPRate: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Follow(ctx, feed, fcfg) }()
	deadline := time.Now().Add(60 * time.Second)
	for !g.Ready() {
		if time.Now().After(deadline) {
			st, reason := g.State()
			t.Fatalf("gate not ready after 60 s: %v %s", st, reason)
		}
		time.Sleep(5 * time.Millisecond)
	}
	return g, func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			t.Errorf("Follow returned %v", err)
		}
		g.Close()
	}
}

// TestGateFollowsEveryWriter: rows inserted and deleted by plain SQL (no Add,
// no Remove) before, during and after the bootstrap reach a following gate:
// once it has applied the WAL position a commit returned, the row is never
// reported absent, and deletes are applied; a restart loads the snapshot and
// catches up with rows written while it was down.
func TestGateFollowsEveryWriter(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "FULL")
	ctx := context.Background()
	fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'user'||g||'@example.com' FROM generate_series(1, 20000) g")
	store := bloomgate.DirSnapshots(t.TempDir())
	fcfg := bloomgate.FollowConfig{Identity: fx.table, Snapshots: store, SnapshotInterval: 200 * time.Millisecond, MaxLag: 10 * time.Second}

	var seq atomic.Int64
	writersCtx, stopWriters := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var committed sync.Map // key → WAL position after its commit
	var deleted sync.Map
	for w := range 3 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			for writersCtx.Err() == nil {
				key := fmt.Sprintf("w%d-%d@example.com", w, seq.Add(1))
				if _, err := fx.pool.Exec(ctx, "INSERT INTO "+fx.table+" (email) VALUES ($1)", key); err != nil {
					t.Error(err)
					return
				}
				committed.Store(key, fx.walEnd(t))
				if rng.IntN(4) == 0 {
					victim := fmt.Sprintf("user%d@example.com", rng.IntN(20000)+1)
					if _, loaded := deleted.LoadOrStore(victim, true); !loaded {
						fx.pool.Exec(ctx, "DELETE FROM "+fx.table+" WHERE email = $1", victim)
					}
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	// Writers before the bootstrap.
	testsvc.Eventually(t, waitLimit, func() bool { return seq.Load() > 10 }, "the writers did not start")
	feed := fx.feed(t)
	g, stop := followGate(t, fx, feed, fcfg)

	// While writers go on: every committed row whose position was applied
	// is present.
	checked, fn := 0, 0
	for end := time.Now().Add(3 * time.Second); time.Now().Before(end); {
		committed.Range(func(k, v any) bool {
			if g.Stats().FeedPosition >= uint64(v.(changefeed.Position)) && g.Ready() {
				checked++
				if !g.MayContainString(k.(string)) {
					fn++
					t.Errorf("false negative: %s (applied %v ≥ %v)", k, g.Stats().FeedPosition, v)
				}
			}
			return fn < 10
		})
	}
	stopWriters()
	wg.Wait()
	final := fx.walEnd(t)
	testsvc.Eventually(t, waitLimit, func() bool { return g.Stats().FeedPosition >= uint64(final) && g.Ready() },
		"the gate did not catch up with %s", final)
	keys := fx.tableKeys(t)
	for k := range keys {
		if !g.MayContainString(k) {
			t.Fatalf("false negative after catching up: %s", k)
		}
	}
	gone, dels := 0, 0
	deleted.Range(func(k, _ any) bool {
		dels++
		if !g.MayContainString(k.(string)) {
			gone++
		}
		return true
	})
	if dels > 0 && gone < dels*9/10 {
		t.Errorf("only %d of %d deleted keys absent: deletes not applied", gone, dels)
	}
	t.Logf("%d checks of applied rows while writing, %d false negatives; %d rows, %d deletes (%d absent); %d snapshots",
		checked, fn, len(keys), dels, gone, g.Stats().Snapshots)
	stop()

	// Rows written while no gate runs; a restart from the snapshot sees them.
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('while-down@example.com')")
	fx.exec(t, "DELETE FROM "+fx.table+" WHERE email = 'user5@example.com'")
	g2, stop2 := followGate(t, fx, fx.feed(t), fcfg)
	defer stop2()
	if b := g2.Stats().Builds; b != 0 {
		t.Fatalf("restart built %d filters instead of loading the snapshot", b)
	}
	for k := range fx.tableKeys(t) {
		if !g2.MayContainString(k) {
			t.Fatalf("false negative after restart: %s", k)
		}
	}
}

// TestGateFollowStaleSnapshot: a snapshot older than the slot's confirmed
// position cannot be caught up from; the gate bootstraps afresh instead, and
// misses nothing.
func TestGateFollowStaleSnapshot(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "FULL")
	fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'user'||g||'@example.com' FROM generate_series(1, 1000) g")
	old := bloomgate.FollowConfig{Identity: fx.table, Snapshots: bloomgate.DirSnapshots(t.TempDir())}
	_, stop := followGate(t, fx, fx.feed(t), old)
	stop() // snapshot at P1 in old's store
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('second@example.com')")
	other := bloomgate.FollowConfig{Identity: fx.table, Snapshots: bloomgate.DirSnapshots(t.TempDir())}
	g2, stop2 := followGate(t, fx, fx.feed(t), other) // moves the slot past P1
	target := fx.walEnd(t)
	testsvc.Eventually(t, waitLimit, func() bool { return g2.Stats().FeedPosition >= uint64(target) }, "the second gate did not reach %s", target)
	stop2()
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('third@example.com')")
	g3, stop3 := followGate(t, fx, fx.feed(t), old)
	defer stop3()
	for k := range fx.tableKeys(t) {
		if !g3.MayContainString(k) {
			t.Fatalf("false negative after a stale snapshot: %s", k)
		}
	}
	if b := g3.Stats().Builds; b != 1 {
		t.Fatalf("%d builds: the stale snapshot was not replaced by a bootstrap", b)
	}
}
