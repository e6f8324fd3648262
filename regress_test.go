package bloomgate_test

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// fakeClock is a clock tests move by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)} }

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) Advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

// Regression (issue 7, false negative 2): a Remove that reaches a filter whose
// build snapshot started after the delete committed removes another key's
// trace. DELETE committed, Rebuild, then Remove, as the docs allow.
func TestRemoveAfterRebuildKeepsOtherKeys(t *testing.T) {
	for _, kind := range []string{"cuckoo", "counting"} {
		t.Run(kind, func(t *testing.T) {
			n := 200000
			if raceEnabled {
				n = 50000
			}
			all := keys("user", n)
			src := memfeed.NewSource(all...)
			clock := newFakeClock()
			newFilter := bloomgate.NewCounting
			if kind == "cuckoo" {
				newFilter = bloomgate.NewCuckoo
			}
			g := newGate(t, bloomgate.Config{Source: src, Now: clock.Now, NewFilter: newFilter})
			ctx := context.Background()
			if err := g.Warm(ctx); err != nil {
				t.Fatal(err)
			}
			clock.Advance(time.Hour)
			gone, kept := all[:n/10], all[n/10:]
			for _, k := range gone {
				src.Delete(k) // committed
			}
			if err := g.Rebuild(ctx); err != nil { // its snapshot lacks them
				t.Fatal(err)
			}
			for _, k := range gone {
				// After commit, as the docs ask; the rebuild started
				// less than RebuildOverlap ago, so it is deferred.
				if err := g.RemoveString(k); !errors.Is(err, bloomgate.ErrRemoveDeferred) {
					t.Fatalf("Remove right after a rebuild: %v, want ErrRemoveDeferred", err)
				}
			}
			fn := 0
			for _, k := range kept {
				if !g.MayContainString(k) {
					fn++
				}
			}
			if fn > 0 {
				t.Fatalf("%d of %d kept keys reported absent after removes that followed a rebuild", fn, len(kept))
			}
			if s := g.Stats(); s.UnappliedRemoves != uint64(len(gone)) {
				t.Fatalf("unapplied removes %d, want %d", s.UnappliedRemoves, len(gone))
			}
			// The next build honours them all, by leaving the rows out.
			if err := g.Rebuild(ctx); err != nil {
				t.Fatal(err)
			}
			checkNoFalseNegatives(t, g, kept)
			if s := g.Stats(); s.UnappliedRemoves != 0 || s.Filter.Items != uint64(len(kept)) {
				t.Fatalf("after the next build: unapplied %d, items %d", s.UnappliedRemoves, s.Filter.Items)
			}
		})
	}
}

// Regression (issue 7, false negative 1): a filter whose adds expire
// (Windowed) was accepted as a gate's membership filter and, once its
// generation ended, reported every row absent while the gate was ready. A
// gate's Filter now adds by hash without an expiry, which Windowed does not
// offer.
func TestExpiringFilterRefused(t *testing.T) {
	w, err := filter.NewWindowed(filter.WindowedConfig{Capacity: 1000, FPRate: 0.01, MaxTTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := any(w).(bloomgate.Filter); ok {
		t.Fatal("*filter.Windowed satisfies bloomgate.Filter: a gate could be handed a filter that forgets keys")
	}
}

// Regression: EmptyFetches counted every coalesced caller while Fetches
// counted the shared fetch once.
func TestCoalescedEmptyFetchCountsOnce(t *testing.T) {
	src := memfeed.NewSource(keys("user", 1000)...)
	g := newGate(t, bloomgate.Config{Source: src, FPRate: 0.2, Capacity: 1000})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	fp := ""
	for _, k := range keys("nobody", 10000) {
		if g.MayContainString(k) {
			fp = k
			break
		}
	}
	if fp == "" {
		t.Fatal("no false positive among 10000 absent keys at FP rate 0.2")
	}
	before := g.Stats()
	release := make(chan struct{})
	var wg, started sync.WaitGroup
	started.Add(8)
	var calls atomic.Int32
	for range 8 {
		wg.Go(func() {
			started.Done()
			bloomgate.Lookup(context.Background(), g, fp, func(context.Context) (int, bool, error) {
				calls.Add(1)
				<-release
				return 0, false, nil
			})
		})
	}
	started.Wait()
	time.Sleep(50 * time.Millisecond) // let them pile onto the one flight
	close(release)
	wg.Wait()
	after := g.Stats()
	fetches, empty := after.Fetches-before.Fetches, after.EmptyFetches-before.EmptyFetches
	if fetches != uint64(calls.Load()) || empty != fetches {
		t.Fatalf("%d fetch calls: Fetches +%d, EmptyFetches +%d; want both equal to the calls", calls.Load(), fetches, empty)
	}
}

// Regression: a successful rebuild published the new filter without logging
// the rebuilding → ready change.
func TestRebuildLogsStateChanges(t *testing.T) {
	var buf syncBuffer
	g := newGate(t, bloomgate.Config{Source: memfeed.NewSource("a"), Logger: slog.New(slog.NewTextHandler(&buf, nil))})
	ctx := context.Background()
	if err := g.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	if err := g.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"from=warming to=ready", "from=ready to=rebuilding", "from=rebuilding to=ready"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log lacks %q:\n%s", want, buf.String())
		}
	}
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// Regression: a custom normaliser was handed the caller's memory (for string
// keys, the string's own bytes) and could corrupt it.
func TestCustomNormalizerGetsACopy(t *testing.T) {
	upperInPlace := bloomgate.CustomNormalizer(func(dst, key []byte) []byte {
		for i, c := range key {
			if 'a' <= c && c <= 'z' {
				key[i] = c - ('a' - 'A')
			}
		}
		return append(dst, key...)
	})
	g := newGate(t, bloomgate.Config{Source: memfeed.NewSource("ALICE"), Normalizer: upperInPlace})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	key := strings.Clone("alice") // writable memory, so a write corrupts rather than faults
	b := []byte("alice")
	if !g.MayContainString(key) || !g.MayContain(b) {
		t.Fatal("normalised key not found")
	}
	g.AddString(key)
	g.RemoveString(key)
	bloomgate.Lookup(context.Background(), g, key, func(context.Context) (int, bool, error) { return 0, true, nil })
	if key != "alice" || string(b) != "alice" {
		t.Fatalf("the caller's key was changed to %q / %q", key, b)
	}
}

// The journal of recent adds covers RebuildOverlap and not much more, at any
// sustained rate: memory is bounded by the rate, and every add a build must
// replay is there.
func TestJournalBounded(t *testing.T) {
	ks := keys("k", 1<<12)
	for _, rate := range []int{1000, 5000} {
		clock := newFakeClock()
		overlap := time.Minute
		g := newGate(t, bloomgate.Config{Source: memfeed.NewSource(), Now: clock.Now, RebuildOverlap: overlap})
		if err := g.Warm(context.Background()); err != nil {
			t.Fatal(err)
		}
		step := time.Second / time.Duration(rate)
		maxHeld := 0
		for i := range 150 * rate { // two and a half minutes of adds
			clock.Advance(step)
			if err := g.AddString(ks[i%len(ks)]); err != nil {
				t.Fatal(err)
			}
			if i >= 60*rate && i%997 == 0 { // past the first overlap
				n := g.Stats().JournalAdds
				if n < 60*rate {
					t.Fatalf("rate %d/s: journal holds %d adds, fewer than one overlap's %d", rate, n, 60*rate)
				}
				maxHeld = max(maxHeld, n)
			}
		}
		if limit := 60 * rate * 17 / 16; maxHeld > limit+1 {
			t.Fatalf("rate %d/s: journal held %d adds, limit %d", rate, maxHeld, limit)
		}
	}
}

func slogTo(w *syncBuffer) *slog.Logger { return slog.New(slog.NewTextHandler(w, nil)) }
