package bloomgate_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/memfeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

func keys(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%d@example.com", prefix, i)
	}
	return out
}

func newGate(t *testing.T, cfg bloomgate.Config) *bloomgate.Gate {
	t.Helper()
	g, err := bloomgate.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	return g
}

func checkNoFalseNegatives(t *testing.T, g *bloomgate.Gate, ks []string) {
	t.Helper()
	for _, k := range ks {
		if !g.MayContainString(k) {
			t.Fatalf("false negative for %q (state %v)", k, g.Stats().State)
		}
	}
}

func TestNewInvalid(t *testing.T) {
	for name, cfg := range map[string]bloomgate.Config{
		"fp rate 1":        {Source: memfeed.NewSource(), FPRate: 1},
		"fp rate negative": {Source: memfeed.NewSource(), FPRate: -0.1},
		"overfill < 1":     {Source: memfeed.NewSource(), OverfillFactor: 0.5},
		"negative key len": {Source: memfeed.NewSource(), MaxKeyLen: -1},
	} {
		if _, err := bloomgate.New(cfg); !errors.Is(err, bloomgate.ErrInvalidConfig) {
			t.Errorf("%s: %v, want ErrInvalidConfig", name, err)
		}
	}
}

// TestNoSourceWarmRunFail: a gate without a Source (one that only follows
// a change feed) is valid, and Warm and Run say what is missing.
func TestNoSourceWarmRunFail(t *testing.T) {
	g, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Warm(context.Background()); !errors.Is(err, bloomgate.ErrInvalidConfig) {
		t.Errorf("Warm without a Source: %v, want ErrInvalidConfig", err)
	}
	if err := g.Run(context.Background()); !errors.Is(err, bloomgate.ErrInvalidConfig) {
		t.Errorf("Run without a Source: %v, want ErrInvalidConfig", err)
	}
}

func TestFailOpenUntilWarm(t *testing.T) {
	src := memfeed.NewSource(keys("user", 1000)...)
	g := newGate(t, bloomgate.Config{Source: src})
	if st, reason := g.State(); st != bloomgate.StateWarming || reason == "" || g.Ready() {
		t.Fatalf("new gate: %v %q", st, reason)
	}
	// Before warm-up every key is "maybe", and Lookup asks the database.
	for _, k := range keys("nobody", 100) {
		if !g.MayContainString(k) {
			t.Fatal("answered absent before warm-up")
		}
	}
	fetched := 0
	_, found, err := bloomgate.Lookup(context.Background(), g, "user1@example.com", func(context.Context) (int, bool, error) {
		fetched++
		return 1, src.Has("user1@example.com"), nil
	})
	if err != nil || !found || fetched != 1 {
		t.Fatalf("Lookup before warm: found=%v fetched=%d err=%v", found, fetched, err)
	}
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !g.Ready() {
		t.Fatal("not ready after warm-up")
	}
	checkNoFalseNegatives(t, g, keys("user", 1000))
	absent := 0
	for _, k := range keys("nobody", 10000) {
		if !g.MayContainString(k) {
			absent++
		}
	}
	if absent < 9900 {
		t.Fatalf("only %d of 10000 absent keys answered absent", absent)
	}
	s := g.Stats()
	if s.FailOpen != 101 || s.Builds != 1 || s.Filter.Items != 1000 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestCountersAreStatsWithoutFilter: Counters gives every field Stats
// does but the filter's description, before and after a warm-up.
func TestCountersAreStatsWithoutFilter(t *testing.T) {
	g := newGate(t, bloomgate.Config{Source: memfeed.NewSource(keys("user", 1000)...)})
	check := func(when string) {
		t.Helper()
		s, c := g.Stats(), g.Counters()
		if c.Filter != (filter.Stats{}) {
			t.Errorf("%s: Counters().Filter = %+v, want zero", when, c.Filter)
		}
		s.Filter = filter.Stats{}
		if s != c {
			t.Errorf("%s: Counters() = %+v, want Stats() without Filter, %+v", when, c, s)
		}
	}
	g.MayContainString("nobody@example.com") // a fail-open lookup
	check("warming")
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys("nobody", 100) {
		g.MayContainString(k)
	}
	check("ready")
	if g.Counters().Builds != 1 || g.Stats().Filter.Items != 1000 {
		t.Fatalf("Counters %+v, Stats().Filter %+v", g.Counters(), g.Stats().Filter)
	}
}

func TestFailedWarmFailsOpen(t *testing.T) {
	src := memfeed.NewSource(keys("user", 5000)...)
	src.FailAt(2500)
	var last bloomgate.Progress
	g := newGate(t, bloomgate.Config{Source: src, OnProgress: func(p bloomgate.Progress) { last = p }})
	if err := g.Warm(context.Background()); err == nil {
		t.Fatal("warm-up over a failing source succeeded")
	}
	if st, reason := g.State(); st != bloomgate.StateDegraded || !strings.Contains(reason, "connection lost") {
		t.Fatalf("after failed warm: %v %q", st, reason)
	}
	if !last.Done || last.Keys != 2500 || last.Estimate != 5000 {
		t.Fatalf("last progress %+v", last)
	}
	// Half a filter must never answer: everything is "maybe".
	for _, k := range keys("nobody", 1000) {
		if !g.MayContainString(k) {
			t.Fatal("degraded gate answered absent")
		}
	}
	src.FailAt(0)
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	if st, _ := g.State(); st != bloomgate.StateReady {
		t.Fatalf("state %v after a good warm-up", st)
	}
	checkNoFalseNegatives(t, g, keys("user", 5000))
}

func TestFailedRebuildKeepsServing(t *testing.T) {
	src := memfeed.NewSource(keys("user", 2000)...)
	g := newGate(t, bloomgate.Config{Source: src})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	src.FailAt(1000)
	if err := g.Rebuild(context.Background()); err == nil {
		t.Fatal("rebuild over a failing source succeeded")
	}
	if st, _ := g.State(); st != bloomgate.StateReady {
		t.Fatalf("state %v after failed rebuild, want ready on the old filter", st)
	}
	checkNoFalseNegatives(t, g, keys("user", 2000))
}

// TestRebuildKeepsConcurrentChanges pauses a rebuild halfway and adds keys:
// the new filter must have them, and keys whose transaction began before the
// rebuild (Add before commit, commit after the snapshot) too.
func TestRebuildKeepsConcurrentChanges(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	clock := func() time.Time { return now }
	src := memfeed.NewSource(keys("user", 3000)...)
	g := newGate(t, bloomgate.Config{Source: src, Now: clock, RebuildOverlap: time.Minute})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	// An in-flight transaction: Add, but the row is not committed yet, so
	// the rebuild's snapshot will not see it.
	if err := g.AddString("inflight@example.com"); err != nil {
		t.Fatal(err)
	}
	// A key added long ago and committed: in the snapshot anyway.
	now = now.Add(30 * time.Second)

	paused, resume := src.PauseAt(1500)
	done := make(chan error)
	go func() { done <- g.Rebuild(context.Background()) }()
	<-paused
	if st, _ := g.State(); st != bloomgate.StateRebuilding || !g.Ready() {
		t.Fatalf("state %v during rebuild", st)
	}
	during := keys("during", 500)
	for _, k := range during {
		src.Insert(k) // not in the paused scan's snapshot
		if err := g.AddString(k); err != nil {
			t.Fatal(err)
		}
	}
	checkNoFalseNegatives(t, g, during)
	resume()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	src.Insert("inflight@example.com") // commits after the snapshot
	checkNoFalseNegatives(t, g, keys("user", 3000))
	checkNoFalseNegatives(t, g, during)
	checkNoFalseNegatives(t, g, []string{"inflight@example.com"})
	if s := g.Stats(); s.Builds != 2 || s.State != bloomgate.StateReady {
		t.Fatalf("stats %+v", s)
	}
}

// TestConcurrentNoFalseNegatives runs lookups, adds, removes and rebuilds
// together; every key acknowledged and not removed must always be present.
func TestConcurrentNoFalseNegatives(t *testing.T) {
	src := memfeed.NewSource(keys("user", 20000)...)
	g := newGate(t, bloomgate.Config{Source: src, FPRate: 0.01})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var acked atomic.Int64
	added := keys("new", 20000)
	var failures atomic.Int64
	wg.Go(func() { // writer: insert row, Add, acknowledge
		for i, k := range added {
			src.Insert(k)
			if err := g.AddString(k); err != nil {
				t.Error(err)
				return
			}
			acked.Store(int64(i + 1))
		}
	})
	wg.Go(func() { // remover: deletes old users; removed keys are not checked
		for _, k := range keys("user", 20000)[10000:] {
			src.Delete(k)
			g.RemoveString(k)
		}
	})
	wg.Go(func() { // rebuilder
		for ctx.Err() == nil {
			if err := g.Rebuild(ctx); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}
	})
	for range 2 {
		wg.Go(func() { // readers
			stable := keys("user", 10000)
			for ctx.Err() == nil {
				n := acked.Load()
				for _, k := range added[:n] {
					if !g.MayContainString(k) {
						failures.Add(1)
					}
				}
				for _, k := range stable[:1000] {
					if !g.MayContainString(k) {
						failures.Add(1)
					}
				}
			}
		})
	}
	// Run until every key is acknowledged and rebuilds have overlapped.
	waitFor(t, func() bool { return acked.Load() == int64(len(added)) && g.Stats().Builds >= 3 })
	cancel()
	wg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d false negatives under concurrency", n)
	}
	if g.Stats().Builds < 2 {
		t.Fatalf("no rebuild ran concurrently (builds %d)", g.Stats().Builds)
	}
	checkNoFalseNegatives(t, g, added)
}

func TestLookupCountsAndCoalesces(t *testing.T) {
	present := keys("user", 5000)
	src := memfeed.NewSource(present...)
	g := newGate(t, bloomgate.Config{Source: src, FPRate: 0.01})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	fetch := func(k string) func(context.Context) (string, bool, error) {
		return func(context.Context) (string, bool, error) { return k, src.Has(k), nil }
	}
	absent := keys("nobody", 50000)
	for _, k := range absent {
		if _, found, err := bloomgate.Lookup(context.Background(), g, k, fetch(k)); found || err != nil {
			t.Fatalf("Lookup(%q) = %v, %v", k, found, err)
		}
	}
	for _, k := range present {
		if v, found, err := bloomgate.Lookup(context.Background(), g, k, fetch(k)); !found || v != k || err != nil {
			t.Fatalf("Lookup(%q) = %q %v %v", k, v, found, err)
		}
	}
	s := g.Stats()
	if s.Lookups != 55000 || s.Fetches != 5000+s.EmptyFetches || s.Absent+s.EmptyFetches != 50000 {
		t.Fatalf("counts: %+v", s)
	}
	if s.ObservedFPRate > 0.015 || s.ObservedFPRate != float64(s.EmptyFetches)/50000 {
		t.Fatalf("observed FP %v (empty fetches %d)", s.ObservedFPRate, s.EmptyFetches)
	}
	// Concurrent lookups of one key share one fetch.
	release := make(chan struct{})
	var calls atomic.Int32
	var wg, started sync.WaitGroup
	started.Add(8)
	for range 8 {
		wg.Go(func() {
			started.Done()
			bloomgate.Lookup(context.Background(), g, "user7@example.com", func(context.Context) (int, bool, error) {
				calls.Add(1)
				<-release
				return 7, true, nil
			})
		})
	}
	started.Wait()
	time.Sleep(50 * time.Millisecond) // let them pile onto the one flight
	close(release)
	wg.Wait()
	if c := calls.Load(); c >= 8 {
		t.Fatalf("%d fetches for 8 concurrent lookups of one key", c)
	}
	// Errors pass through.
	boom := errors.New("boom")
	if _, _, err := bloomgate.Lookup(context.Background(), g, "user8@example.com", func(context.Context) (int, bool, error) {
		return 0, false, boom
	}); !errors.Is(err, boom) {
		t.Fatalf("err %v", err)
	}
}

func TestNormalizer(t *testing.T) {
	src := memfeed.NewSource("Alice@Example.COM ", "bob@example.com", "ÉLODIE@example.com", "bad\xff@example.com", "")
	g := newGate(t, bloomgate.Config{Source: src, Normalizer: bloomgate.LowerTrim})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkNoFalseNegatives(t, g, []string{"alice@example.com", " ALICE@example.com\t", "BOB@EXAMPLE.COM", "élodie@example.com", "Élodie@Example.com", "bad\xff@example.com", "BAD\xff@example.com", ""})
	if err := g.AddString("  NEW@Example.com"); err != nil {
		t.Fatal(err)
	}
	checkNoFalseNegatives(t, g, []string{"new@example.com"})
	custom := bloomgate.CustomNormalizer(func(dst, key []byte) []byte { return append(dst, strings.TrimPrefix(string(key), "id:")...) })
	g2 := newGate(t, bloomgate.Config{Source: memfeed.NewSource("42"), Normalizer: custom})
	g2.Warm(context.Background())
	checkNoFalseNegatives(t, g2, []string{"id:42", "42"})
}

func TestLongAndEmptyKeys(t *testing.T) {
	long := strings.Repeat("x", 100)
	src := memfeed.NewSource("short", long, "")
	g := newGate(t, bloomgate.Config{Source: src, MaxKeyLen: 50})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The long key was skipped at build time, yet is never reported absent.
	checkNoFalseNegatives(t, g, []string{"short", long, "", strings.Repeat("y", 51)})
	if err := g.AddString(long); !errors.Is(err, bloomgate.ErrKeyTooLong) {
		t.Fatalf("Add(long) = %v", err)
	}
	if s := g.Stats(); s.FailOpen != 2 {
		t.Fatalf("fail-open count %d, want 2 (two long keys)", s.FailOpen)
	}
}

// refusingFilter wraps a Bloom and refuses keys after a limit, like a full
// cuckoo filter.
type refusingFilter struct {
	*filter.Bloom
	left atomic.Int64
}

func (f *refusingFilter) AddHash(h uint64) error {
	if f.left.Add(-1) < 0 {
		return filter.ErrFull
	}
	return f.Bloom.AddHash(h)
}

func TestRefusedAddDegrades(t *testing.T) {
	src := memfeed.NewSource(keys("user", 100)...)
	limit := int64(150)
	g := newGate(t, bloomgate.Config{Source: src, NewFilter: func(n uint64, p float64, seed uint64) (bloomgate.Filter, error) {
		b, err := filter.NewBloom(filter.BloomConfig{Capacity: n, FPRate: p, Seed: seed})
		f := &refusingFilter{Bloom: b}
		f.left.Store(limit)
		return f, err
	}})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i, k := range keys("new", 100) {
		err := g.AddString(k)
		if i < 50 && err != nil {
			t.Fatal(err)
		}
		if i == 50 && !errors.Is(err, filter.ErrFull) {
			t.Fatalf("51st add: %v, want ErrFull", err)
		}
	}
	if st, _ := g.State(); st != bloomgate.StateDegraded {
		t.Fatalf("state %v after a refused add", st)
	}
	checkNoFalseNegatives(t, g, keys("new", 100)) // failing open
	for _, k := range keys("nobody", 100) {
		if !g.MayContainString(k) {
			t.Fatal("degraded gate answered absent")
		}
	}
	// A rebuild with a filter big enough recovers.
	limit = 1 << 30
	for _, k := range keys("new", 100) {
		src.Insert(k)
	}
	if err := g.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !g.Ready() {
		t.Fatal("not ready after rebuild")
	}
	checkNoFalseNegatives(t, g, keys("new", 100))
}

func TestRunTriggers(t *testing.T) {
	t.Run("overfill", func(t *testing.T) {
		src := memfeed.NewSource(keys("user", 1000)...)
		g := newGate(t, bloomgate.Config{Source: src, Capacity: 1000, FPRate: 0.01, CheckInterval: time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go g.Run(ctx)
		waitFor(t, func() bool { return g.Stats().Builds == 1 })
		for _, k := range keys("more", 2000) { // 3× capacity
			src.Insert(k)
			g.AddString(k)
		}
		// Capacity is fixed, so each rebuild is overfilled again; two
		// builds are enough to show the trigger fires.
		waitFor(t, func() bool { return g.Stats().Builds >= 2 })
		checkNoFalseNegatives(t, g, keys("more", 2000))
	})
	t.Run("unapplied removes", func(t *testing.T) {
		src := memfeed.NewSource(keys("user", 1000)...)
		g := newGate(t, bloomgate.Config{Source: src, CheckInterval: time.Millisecond, RemoveRebuildRatio: 0.05})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go g.Run(ctx)
		waitFor(t, func() bool { return g.Stats().Builds == 1 })
		for _, k := range keys("user", 1000)[:100] {
			src.Delete(k)
			if err := g.RemoveString(k); !errors.Is(err, bloomgate.ErrRemoveUnsupported) {
				t.Fatalf("Remove on a Bloom: %v", err)
			}
		}
		// The trigger fires once more than 5 % are unapplied. Removes made
		// while that rebuild runs never reach its filter and stay counted,
		// so the count reaches 0 only after a build that follows them all.
		waitFor(t, func() bool { return g.Stats().Builds >= 2 })
		if err := g.Rebuild(ctx); err != nil {
			t.Fatal(err)
		}
		if u := g.Stats().UnappliedRemoves; u != 0 {
			t.Fatalf("%d unapplied removes after a build that followed them all", u)
		}
		checkNoFalseNegatives(t, g, keys("user", 1000)[100:])
	})
	t.Run("schedule and degraded", func(t *testing.T) {
		now := time.Unix(0, 0)
		var mu sync.Mutex
		clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		g := newGate(t, bloomgate.Config{Source: memfeed.NewSource("a"), CheckInterval: time.Millisecond, RebuildInterval: time.Hour, Now: clock})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go g.Run(ctx)
		waitFor(t, func() bool { return g.Stats().Builds == 1 })
		mu.Lock()
		now = now.Add(2 * time.Hour)
		mu.Unlock()
		waitFor(t, func() bool { return g.Stats().Builds == 2 })
		g.Degrade("change feed lost")
		waitFor(t, func() bool { return g.Stats().Builds == 3 && g.Ready() })
	})
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	testsvc.Eventually(t, 20*time.Second, cond, "condition not reached")
}

func TestMetrics(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	src := memfeed.NewSource(keys("user", 100)...)
	g := newGate(t, bloomgate.Config{Source: src, Registerer: reg})
	g.MayContainString("before-warm")
	g.Warm(context.Background())
	for _, k := range keys("nobody", 100) {
		g.MayContainString(k)
	}
	if err := testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP bloomgate_fail_open_total Lookups sent to the database because the gate could not be sure, by reason.
# TYPE bloomgate_fail_open_total counter
bloomgate_fail_open_total{reason="degraded"} 0
bloomgate_fail_open_total{reason="key_too_long"} 0
bloomgate_fail_open_total{reason="warming"} 1
# HELP bloomgate_lookups_total Lookups answered from the filter.
# TYPE bloomgate_lookups_total counter
bloomgate_lookups_total 100
# HELP bloomgate_filter_items Keys added to the serving filter, duplicates included.
# TYPE bloomgate_filter_items gauge
bloomgate_filter_items 100
# HELP bloomgate_state 1 for the gate's current state.
# TYPE bloomgate_state gauge
bloomgate_state{state="degraded"} 0
bloomgate_state{state="ready"} 1
bloomgate_state{state="rebuilding"} 0
bloomgate_state{state="warming"} 0
# HELP bloomgate_filter_generation Generation of the serving filter: the count of builds that produced it, or, on a fan-out instance, the feeder's generation.
# TYPE bloomgate_filter_generation gauge
bloomgate_filter_generation 1
# HELP bloomgate_swaps_total Filters that replaced a serving one without failing open (rebuilds, newer generations).
# TYPE bloomgate_swaps_total counter
bloomgate_swaps_total 0
`), "bloomgate_fail_open_total", "bloomgate_lookups_total", "bloomgate_filter_items", "bloomgate_state",
		"bloomgate_filter_generation", "bloomgate_swaps_total"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "bloomgate_builds_total"); n != 1 {
		t.Fatalf("builds_total series: %d", n)
	}
	g.Close()
	g.Close() // idempotent
	if n, _ := reg.Gather(); len(n) != 0 {
		t.Fatalf("%d metric families left after Close", len(n))
	}
	if err := g.AddString("x"); !errors.Is(err, bloomgate.ErrClosed) {
		t.Fatalf("Add after Close: %v", err)
	}
	// The refused Add's row may still commit: a closed gate fails open.
	if !g.MayContainString("x") || g.Ready() {
		t.Fatal("a closed gate answered absent")
	}
}

func TestMayContainAllocs(t *testing.T) {
	for _, norm := range []bloomgate.Normalizer{bloomgate.Exact, bloomgate.LowerTrim} {
		g := newGate(t, bloomgate.Config{Source: memfeed.NewSource(keys("user", 100)...), Normalizer: norm})
		g.Warm(context.Background())
		key := []byte("User5@Example.com")
		if n := testing.AllocsPerRun(1000, func() { g.MayContain(key) }); n != 0 {
			t.Errorf("MayContain allocates %.1f times", n)
		}
		if n := testing.AllocsPerRun(1000, func() { g.MayContainString("nobody@example.com") }); n != 0 {
			t.Errorf("MayContainString allocates %.1f times", n)
		}
	}
}

func TestStaleEstimateDoesNotShrink(t *testing.T) {
	src := memfeed.NewSource(keys("user", 20000)...)
	src.SetEstimate(10) // under-reports its size, like reltuples before ANALYZE
	g := newGate(t, bloomgate.Config{Source: src, FPRate: 0.01})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	// The first build, sized from the estimate of 10, read 20000 keys: it
	// read the source again into a filter sized for them before serving...
	if s := g.Stats().Filter; s.Capacity < 20000 || s.EstimatedFPRate > 0.01 {
		t.Fatalf("first build: capacity %d, estimated FP %.4f", s.Capacity, s.EstimatedFPRate)
	}
	if err := g.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	// ...and a rebuild sizes from what the filter held, not the estimate.
	s := g.Stats()
	if s.Filter.Capacity < 20000 || s.Filter.EstimatedFPRate > 0.01 {
		t.Fatalf("rebuilt filter: capacity %d, estimated FP %.4f", s.Filter.Capacity, s.Filter.EstimatedFPRate)
	}
	checkNoFalseNegatives(t, g, keys("user", 20000))
}

func TestRemoveWithCuckoo(t *testing.T) {
	src := memfeed.NewSource(keys("user", 5000)...)
	clock := newFakeClock()
	g := newGate(t, bloomgate.Config{Source: src, FPRate: 0.001, NewFilter: bloomgate.NewCuckoo, Now: clock.Now})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute) // RebuildOverlap after the build started: removes apply
	gone := keys("user", 5000)[:2500]
	for _, k := range gone {
		src.Delete(k)
		if err := g.RemoveString(k); err != nil {
			t.Fatalf("Remove(%q): %v", k, err)
		}
	}
	checkNoFalseNegatives(t, g, keys("user", 5000)[2500:])
	still := 0
	for _, k := range gone {
		if g.MayContainString(k) {
			still++
		}
	}
	if still > 20 { // 0.1 % FP of 2500, with slack
		t.Fatalf("%d of %d removed keys still reported present", still, len(gone))
	}
	// Removing a key the filter never saw is refused, not applied.
	if err := g.RemoveString("stranger@example.com"); !errors.Is(err, filter.ErrNotFound) {
		t.Fatalf("Remove(stranger) = %v, want ErrNotFound", err)
	}
	checkNoFalseNegatives(t, g, keys("user", 5000)[2500:])
	if s := g.Stats(); s.UnappliedRemoves != 0 {
		t.Fatalf("unapplied removes %d with a cuckoo filter", s.UnappliedRemoves)
	}
}
