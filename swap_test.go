package bloomgate_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// genFeed is a fan-out instance in miniature: a snapshot-only feed over a
// memfeed.Feed, whose filters are another gate's snapshots (the feeder's),
// each published as a new generation. The instance's own stream can be
// held, to put it behind a snapshot.
type genFeed struct {
	*memfeed.Feed
	mu      sync.Mutex
	snap    genSnap // the newest published
	served  uint64
	swapped int
	newer   chan struct{}
	held    bool
	frozen  bool // Save keeps the snapshot published before
	loads   int  // LoadNewer calls that loaded a snapshot
	// at is the instance's position; paths, where each snapshot loaded
	// was from it: "behind", "ahead", "at".
	at    func() changefeed.Position
	paths []string
	cond  *sync.Cond
}

type genSnap struct {
	pos  changefeed.Position
	gen  uint64
	data []byte
}

var (
	_ bloomgate.Feed        = (*genFeed)(nil)
	_ bloomgate.Generations = (*genFeed)(nil)
)

func newGenFeed(f *memfeed.Feed) *genFeed {
	gf := &genFeed{Feed: f, newer: make(chan struct{}, 1)}
	gf.cond = sync.NewCond(&gf.mu)
	return gf
}

func (f *genFeed) SnapshotOnly() bool { return true }

var errSnapshotOnly = errors.New("snapshot only")

func (f *genFeed) Bootstrap(context.Context, func([]byte) error) (changefeed.Position, error) {
	return 0, errSnapshotOnly
}

func (f *genFeed) Rebuild(context.Context, func([]byte) error) (changefeed.Position, error) {
	return 0, errSnapshotOnly
}

// Stream is the memfeed.Feed's, waiting while the stream is held.
func (f *genFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	stop := context.AfterFunc(ctx, func() { f.hold(f.isHeld()) })
	defer stop()
	return f.Feed.Stream(ctx, from, func(t changefeed.Txn) error {
		f.mu.Lock()
		for f.held && ctx.Err() == nil {
			f.cond.Wait()
		}
		f.mu.Unlock()
		return apply(t)
	})
}

func (f *genFeed) isHeld() bool { f.mu.Lock(); defer f.mu.Unlock(); return f.held }

func (f *genFeed) hold(h bool) { f.mu.Lock(); f.held = h; f.cond.Broadcast(); f.mu.Unlock() }

func (f *genFeed) Newer() <-chan struct{} { return f.newer }

func (f *genFeed) LoadNewer(ctx context.Context, try func(io.Reader) error) (uint64, error) {
	f.mu.Lock()
	s, served := f.snap, f.served
	f.mu.Unlock()
	if s.gen <= served {
		return 0, nil
	}
	path := "at"
	if p := f.at(); s.pos < p {
		path = "behind"
	} else if s.pos > p {
		path = "ahead"
	}
	err := try(bytes.NewReader(s.data))
	f.mu.Lock()
	f.loads++
	f.paths = append(f.paths, path)
	f.mu.Unlock()
	return s.gen, err
}

// CatchUp reads the same log a second time.
func (f *genFeed) CatchUp(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	return f.Feed.Stream(ctx, from, apply)
}

func (f *genFeed) Swapped(pos changefeed.Position, gen uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.served = max(f.served, gen)
	f.swapped++
}

func (f *genFeed) Generation() uint64 { f.mu.Lock(); defer f.mu.Unlock(); return f.served }

// Save publishes the feeder's snapshot as the next generation (the feeder
// side: its gate's Snapshots).
func (f *genFeed) Save(ctx context.Context, pos changefeed.Position, write func(io.Writer) error) error {
	var b bytes.Buffer
	if err := write(&b); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.frozen {
		f.snap = genSnap{pos: pos, gen: f.snap.gen + 1, data: b.Bytes()}
	}
	return nil
}

// feederStore is the feeder's Snapshots: it publishes, and never loads.
type feederStore struct{ f *genFeed }

func (s feederStore) Save(ctx context.Context, pos changefeed.Position, write func(io.Writer) error) error {
	return s.f.Save(ctx, pos, write)
}

func (s feederStore) Load(context.Context, func(io.Reader) error) error {
	return bloomgate.ErrNoSnapshot
}

// instanceStore is the instance's Snapshots: the newest published one.
type instanceStore struct{ f *genFeed }

func (s instanceStore) Save(context.Context, changefeed.Position, func(io.Writer) error) error {
	return nil
}

func (s instanceStore) Load(ctx context.Context, try func(io.Reader) error) error {
	s.f.mu.Lock()
	snap := s.f.snap
	s.f.mu.Unlock()
	if snap.data == nil {
		return bloomgate.ErrNoSnapshot
	}
	if err := try(bytes.NewReader(snap.data)); err != nil {
		return err
	}
	s.f.mu.Lock()
	s.f.served = snap.gen
	s.f.mu.Unlock()
	return nil
}

// TestGenerationSwapWithoutFailOpen: an instance swaps in each newer
// generation beside its stream, whether the snapshot is behind the
// instance's position (caught up from the log), ahead of it (the stream
// reaches it), or at it, never failing open; lookups of every committed,
// undeleted key run all along and never miss one, for Bloom and cuckoo
// (whose removes must reach each filter exactly once).
func TestGenerationSwapWithoutFailOpen(t *testing.T) {
	for _, kind := range []struct {
		name      string
		newFilter func(uint64, float64, uint64) (bloomgate.Filter, error)
	}{{"bloom", bloomgate.NewBloom}, {"cuckoo", bloomgate.NewCuckoo}} {
		t.Run(kind.name, func(t *testing.T) {
			var pre []string
			for i := range 1000 {
				pre = append(pre, fmt.Sprintf("pre%d", i))
			}
			mf := memfeed.NewFeed(pre...)
			gf := newGenFeed(mf)
			cfg := bloomgate.Config{NewFilter: kind.newFilter, FPRate: 0.01}
			_, stopFeeder := follow(t, mf, cfg, bloomgate.FollowConfig{Snapshots: feederStore{gf}, SnapshotInterval: 1})
			defer stopFeeder()
			waitFor(t, func() bool { gf.mu.Lock(); defer gf.mu.Unlock(); return gf.snap.data != nil })
			var instRef atomic.Pointer[bloomgate.Gate]
			gf.at = func() changefeed.Position { return instRef.Load().Position() }
			inst, stopInst := followFeed(t, gf, cfg, bloomgate.FollowConfig{Snapshots: instanceStore{gf}})
			defer stopInst()
			instRef.Store(inst)

			// Keys live now: every one must be present on the instance
			// once it has applied its commit.
			var mu sync.Mutex
			live := map[string]changefeed.Position{}
			for _, k := range mf.Keys() {
				live[k] = 0
			}
			var stop atomic.Bool
			var fns atomic.Int64
			var wg sync.WaitGroup
			failOpen0 := inst.Stats().FailOpen
			wg.Go(func() {
				for !stop.Load() {
					pos := inst.Position()
					mu.Lock()
					for k, at := range live {
						if at <= pos && !inst.MayContainString(k) {
							if fns.Add(1) <= 5 {
								t.Errorf("false negative: %s (committed at %v, applied %v)", k, at, pos)
							}
						}
					}
					mu.Unlock()
				}
			})
			n := 0
			commit := func(rows int) changefeed.Position {
				var ins, del []string
				mu.Lock()
				for range rows {
					ins = append(ins, fmt.Sprintf("k%d", n))
					n++
				}
				for k := range live { // a delete per transaction
					if k[0] == 'k' {
						del = append(del, k)
						delete(live, k)
						break
					}
				}
				mu.Unlock()
				pos := mf.Commit(ins, del)
				mu.Lock()
				for _, k := range ins {
					live[k] = pos
				}
				mu.Unlock()
				return pos
			}
			// freezeAt keeps the feeder's snapshot at pos (it takes one at
			// every transaction) as the newest generation.
			// A snapshot skipped while the one before is written is made
			// up for by an empty transaction; freezeAt returns the
			// snapshot's position.
			freezeAt := func(pos changefeed.Position) changefeed.Position {
				var at changefeed.Position
				waitFor(t, func() bool {
					gf.mu.Lock()
					if gf.snap.pos >= pos {
						gf.frozen, at = true, gf.snap.pos
					}
					gf.mu.Unlock()
					if at == 0 {
						mf.Commit(nil, nil)
					}
					return at != 0
				})
				return at
			}
			thaw := func() { gf.mu.Lock(); gf.frozen = false; gf.mu.Unlock() }
			signal := func() (swaps, loads int) {
				gf.mu.Lock()
				swaps, loads = gf.swapped, gf.loads
				gf.mu.Unlock()
				select {
				case gf.newer <- struct{}{}:
				default:
				}
				return swaps, loads
			}
			swapped := func(swaps int) func() bool {
				return func() bool { gf.mu.Lock(); defer gf.mu.Unlock(); return gf.swapped > swaps }
			}

			// Behind: the snapshot at S, the instance past it, writes going
			// on while it catches up.
			s := commit(10)
			freezeAt(s)
			var p changefeed.Position
			for range 50 {
				p = commit(10)
			}
			waitApplied(t, inst, p)
			var writing atomic.Bool
			writing.Store(true)
			var wwg sync.WaitGroup
			wwg.Go(func() {
				for writing.Load() {
					commit(3)
				}
			})
			swaps, _ := signal()
			waitFor(t, swapped(swaps))
			writing.Store(false)
			wwg.Wait()
			thaw()

			// Ahead: the instance's stream held behind the snapshot.
			gf.hold(true)
			for range 20 {
				p = commit(10)
			}
			p = freezeAt(p)
			swaps, loads := signal()
			waitFor(t, func() bool { gf.mu.Lock(); defer gf.mu.Unlock(); return gf.loads > loads })
			if inst.Position() >= p {
				t.Fatalf("the instance is at %v, not behind the snapshot at %v", inst.Position(), p)
			}
			gf.hold(false)
			waitFor(t, swapped(swaps))
			thaw()

			// At: the snapshot at the instance's position.
			p = freezeAt(commit(10))
			waitApplied(t, inst, p)
			swaps, _ = signal()
			waitFor(t, swapped(swaps))
			thaw()

			p = commit(10)
			waitApplied(t, inst, p)
			stop.Store(true)
			wg.Wait()
			st := inst.Stats()
			gf.mu.Lock()
			gen, paths := gf.served, gf.paths
			gf.mu.Unlock()
			t.Logf("generation %d, %d swaps (snapshot %v the instance), %d false negatives, %d lookups failed open",
				st.Generation, st.Swaps, paths, fns.Load(), st.FailOpen-failOpen0)
			if len(paths) != 3 || paths[0] != "behind" || paths[1] != "ahead" {
				t.Errorf("snapshots loaded %v the instance; want behind, ahead, then at (or behind)", paths)
			}
			if st.FailOpen != failOpen0 {
				t.Errorf("%d lookups failed open", st.FailOpen-failOpen0)
			}
			if st.Swaps != 3 || st.Generation != gen {
				t.Errorf("%d swaps, serving generation %d; want 3 swaps, generation %d", st.Swaps, st.Generation, gen)
			}
		})
	}
}

// followFeed is follow for any feed.
func followFeed(t *testing.T, feed bloomgate.Feed, gcfg bloomgate.Config, fcfg bloomgate.FollowConfig) (*bloomgate.Gate, func()) {
	t.Helper()
	if gcfg.Source == nil {
		gcfg.Source = memfeed.NewSource()
	}
	g := newGate(t, gcfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Follow(ctx, feed, fcfg) }()
	waitFor(t, g.Ready)
	var once sync.Once
	return g, func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Follow returned %v", err)
			}
		})
	}
}

// TestGenerationSwapFallsBack: a newer generation that cannot be swapped in
// beside the stream (its filter hashes with another seed: a feeder that
// started afresh) is loaded as at a start instead: the instance fails open
// for the moment, then serves it, and no live key is ever absent.
func TestGenerationSwapFallsBack(t *testing.T) {
	var pre []string
	for i := range 500 {
		pre = append(pre, fmt.Sprintf("pre%d", i))
	}
	mf := memfeed.NewFeed(pre...)
	gf := newGenFeed(mf)
	gf.at = func() changefeed.Position { return 0 }
	cfg := bloomgate.Config{FPRate: 0.01}
	_, stopFeeder := follow(t, mf, cfg, bloomgate.FollowConfig{Snapshots: feederStore{gf}, SnapshotInterval: 1})
	waitFor(t, func() bool { gf.mu.Lock(); defer gf.mu.Unlock(); return gf.snap.data != nil })
	inst, stopInst := followFeed(t, gf, cfg, bloomgate.FollowConfig{Snapshots: instanceStore{gf}})
	defer stopInst()
	p := mf.Commit([]string{"a", "b"}, nil)
	waitApplied(t, inst, p)
	stopFeeder()

	// A new feeder, a new seed.
	_, stopFeeder2 := follow(t, mf, cfg, bloomgate.FollowConfig{Snapshots: feederStore{gf}, SnapshotInterval: 1})
	defer stopFeeder2()
	p = mf.Commit([]string{"c"}, nil)
	var gen uint64
	waitFor(t, func() bool {
		gf.mu.Lock()
		gen = gf.snap.gen
		ok := gf.snap.pos >= p
		gf.mu.Unlock()
		if !ok { // a snapshot skipped while the one before was written
			mf.Commit(nil, nil)
		}
		return ok
	})
	swaps := inst.Stats().Swaps
	gf.newer <- struct{}{}
	waitFor(t, func() bool { return inst.Stats().Generation >= gen && inst.Ready() })
	for _, k := range []string{"pre0", "pre499", "a", "b", "c"} {
		if !inst.MayContainString(k) {
			t.Errorf("false negative: %s", k)
		}
	}
	if st := inst.Stats(); st.Swaps != swaps {
		t.Errorf("swaps %d → %d: the other seed's filter was swapped in beside the stream", swaps, st.Swaps)
	}
}
