package postgres_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/demo"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// committedKeys is the test's own record of the rows that are committed and
// not being deleted: an append-only array readers sample without locks.
type committedKeys struct {
	mu      sync.Mutex // serialises appends
	keys    []string   // fixed length; keys[i] is written before n passes i
	deleted []atomic.Bool
	n       atomic.Int64
}

func newCommittedKeys(capacity int) *committedKeys {
	return &committedKeys{keys: make([]string, capacity), deleted: make([]atomic.Bool, capacity)}
}

func (c *committedKeys) add(k string) {
	c.mu.Lock()
	n := c.n.Load()
	c.keys[n] = k
	c.n.Store(n + 1)
	c.mu.Unlock()
}

// get returns key i, which must be below n.
func (c *committedKeys) get(i int) string { return c.keys[i] }

// TestStressNoFalseNegatives runs, against the real PostgreSQL and for every
// filter kind a gate accepts, writers that Add before commit and roll a fifth
// of their transactions back, a deleter that removes after commit, rebuilds
// back to back with pauses, and a killer of every third rebuild's COPY
// backend, while readers look up committed keys. Any "absent" for a key that
// is committed and not being deleted is a false negative. Lookups per kind:
// BLOOMGATE_STRESS_LOOKUPS (default 2,500,000: 10 M over the four kinds;
// 500,000 under the race detector).
func TestStressNoFalseNegatives(t *testing.T) {
	testsvc.Long(t, "stress: 300,000-row tables, writers, rebuilds and COPY kills per filter kind")
	lookups := int64(2_500_000)
	if raceEnabled {
		// The race detector makes each lookup and rebuild about ten times
		// slower; a fifth of the lookups keeps the package inside CI's
		// per-binary timeout and still runs every writer, rebuild and kill.
		lookups = 500_000
	}
	if s := os.Getenv("BLOOMGATE_STRESS_LOOKUPS"); s != "" {
		var err error
		if lookups, err = strconv.ParseInt(s, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	kinds := []struct {
		name      string
		newFilter func(uint64, float64, uint64) (bloomgate.Filter, error)
		removes   bool
	}{
		{"bloom", bloomgate.NewBloom, false},
		{"scalable", func(n uint64, p float64, seed uint64) (bloomgate.Filter, error) {
			return filter.NewScalable(filter.ScalableConfig{InitialCapacity: n / 4, FPRate: p, Seed: seed})
		}, false},
		{"counting", bloomgate.NewCounting, true},
		{"cuckoo", bloomgate.NewCuckoo, true},
	}
	pool, schema := testDB(t)
	var total, totalFN int64
	for _, kind := range kinds {
		t.Run(kind.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			users := demo.PostgresUsers{Pool: pool, Table: schema + ".users_" + kind.name}
			if err := users.Create(ctx); err != nil {
				t.Fatal(err)
			}
			const initial, maxInserts = 300_000, 200_000 // COPY of 300k rows is still streaming at the first progress report
			if err := users.Load(ctx, initial, emails("user", initial)); err != nil {
				t.Fatal(err)
			}
			committed := newCommittedKeys(initial + maxInserts)
			for i := range initial {
				committed.add(emails("user", initial)(i))
			}
			var builds, kills atomic.Int64
			var killedIn atomic.Int64 // the rebuild whose COPY was last killed (builds counts rebuilds done)
			killedIn.Store(-1)
			var warmed atomic.Bool // the warm-up is never killed: the test needs its filter
			g, err := bloomgate.New(bloomgate.Config{Source: users.Source(), FPRate: 0.01, NewFilter: kind.newFilter,
				RebuildOverlap: 500 * time.Millisecond,
				OnProgress: func(p bloomgate.Progress) {
					// Progress is reported as parts' batches are added, so a
					// report may land past 1<<16 without one at it: kill on
					// a report at or past it, once per such rebuild. The
					// server may have sent the whole COPY into the socket
					// before the gate has read 1<<16 keys of it (under the
					// race detector it usually has): its backend is then
					// idle in the transaction the copy still needs to
					// commit, and killing it breaks the rebuild as surely.
					// Until a kill has landed, every rebuild is a target.
					b := builds.Load()
					if !warmed.Load() || p.Done || p.Keys < 1<<16 || (b%3 != 2 && kills.Load() > 0) || killedIn.Load() == b {
						return
					}
					var k int64
					pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
						WHERE query LIKE 'COPY (SELECT "email" FROM "`+schema+`"."users_`+kind.name+`"%'
						AND state IN ('active', 'idle in transaction') AND pid <> pg_backend_pid()`).Scan(&k)
					if k > 0 {
						killedIn.Store(b)
						kills.Add(k)
					}
				}})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if err := g.Warm(ctx); err != nil {
				t.Fatal(err)
			}
			warmed.Store(true)
			var wg sync.WaitGroup
			var inserted, rolledBack, removesApplied, checked, fn atomic.Int64
			fail := func(err error) {
				if ctx.Err() == nil {
					t.Error(err)
					cancel()
				}
			}
			for w := range 3 { // writers: Add before commit, a fifth roll back
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(w), 1))
					for i := 0; ctx.Err() == nil && inserted.Load() < maxInserts-100; i++ {
						key := "w" + strconv.Itoa(w) + "-" + strconv.Itoa(i) + "@example.com"
						tx, err := pool.Begin(ctx)
						if err != nil {
							fail(err)
							return
						}
						if _, err := tx.Exec(ctx, "INSERT INTO "+schema+".users_"+kind.name+" (email) VALUES ($1)", key); err != nil {
							tx.Rollback(ctx)
							fail(err)
							return
						}
						if err := g.AddString(key); err != nil && !errors.Is(err, filter.ErrFull) {
							fail(err)
						}
						if rng.IntN(5) == 0 {
							tx.Rollback(ctx)
							rolledBack.Add(1)
							continue
						}
						if err := tx.Commit(ctx); err != nil {
							fail(err)
							return
						}
						committed.add(key)
						inserted.Add(1)
					}
				})
			}
			wg.Go(func() { // deleter: marks, deletes, commits, then removes
				for i := 0; ctx.Err() == nil && i < initial; i += 7 {
					committed.deleted[i].Store(true)
					key := committed.get(i)
					if err := users.Delete(ctx, key); err != nil {
						fail(err)
						return
					}
					switch err := g.RemoveString(key); {
					case err == nil:
						removesApplied.Add(1)
					case errors.Is(err, bloomgate.ErrRemoveUnsupported), errors.Is(err, bloomgate.ErrRemoveDeferred):
					default:
						fail(err)
						return
					}
					time.Sleep(100 * time.Microsecond)
				}
			})
			wg.Go(func() { // rebuilds: three back to back, then a pause longer than RebuildOverlap
				for i := 0; ctx.Err() == nil; i++ {
					g.Rebuild(ctx) // every third is killed; the gate keeps serving
					builds.Add(1)
					if i%3 == 2 {
						backoff.Sleep(ctx, 700*time.Millisecond)
					}
				}
			})
			for r := range 2 { // readers
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(r), 2))
					for ctx.Err() == nil {
						n := int(committed.n.Load())
						for range 1000 {
							i := rng.IntN(n)
							if committed.deleted[i].Load() {
								continue
							}
							key := committed.get(i)
							if !g.MayContainString(key) && !committed.deleted[i].Load() {
								fn.Add(1)
								t.Errorf("false negative: %q (state %v)", key, g.Stats().State)
							}
							checked.Add(1)
						}
						if checked.Load() >= lookups && kills.Load() > 0 && builds.Load() >= 6 && (!kind.removes || removesApplied.Load() > 0) {
							cancel()
						}
					}
				})
			}
			wg.Wait()
			s := g.Stats()
			t.Logf("%s: %d lookups of committed keys checked, %d false negatives; %d inserts (+%d rolled back), %d removes applied of %d, %d rebuilds, %d COPY backends killed, state %v",
				kind.name, checked.Load(), fn.Load(), inserted.Load(), rolledBack.Load(), removesApplied.Load(), s.UnappliedRemoves+uint64(removesApplied.Load()), builds.Load(), kills.Load(), s.State)
			if kind.removes && removesApplied.Load() == 0 {
				t.Error("no remove was applied: the test did not exercise removes")
			}
			if kills.Load() == 0 {
				t.Error("no COPY backend was killed")
			}
			total += checked.Load()
			totalFN += fn.Load()
		})
	}
	t.Logf("all kinds: %d lookups of committed keys checked, %d false negatives", total, totalFN)
}
