package bloomgate

import (
	"context"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// benchFeed is a feed whose table is keys 0..n-1 at position base, followed
// by catchUp one-insert transactions; then it is quiet.
type benchFeed struct {
	n       int
	base    changefeed.Position
	catchUp int
}

func (f *benchFeed) key(i int) []byte { return []byte("user" + strconv.Itoa(i) + "@example.com") }

func (f *benchFeed) Bootstrap(ctx context.Context, fn func([]byte) error) (changefeed.Position, error) {
	for i := range f.n {
		if err := fn(f.key(i)); err != nil {
			return 0, err
		}
	}
	return f.base + changefeed.Position(2*f.catchUp), nil
}

func (f *benchFeed) Rebuild(ctx context.Context, fn func([]byte) error) (changefeed.Position, error) {
	return 0, fmt.Errorf("benchFeed: no rebuilds")
}

func (f *benchFeed) Head(context.Context) (changefeed.Position, error) {
	return f.base + changefeed.Position(2*f.catchUp), nil
}

func (f *benchFeed) Confirm(context.Context, changefeed.Position) error { return nil }

func (f *benchFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	for j := range f.catchUp {
		end := f.base + changefeed.Position(2*j+2)
		if end <= from {
			continue
		}
		t := changefeed.Txn{Commit: end - 1, End: end, Changes: []changefeed.Change{{Kind: changefeed.Insert, Key: f.key(f.n + j)}}}
		if err := apply(t); err != nil {
			return err
		}
	}
	<-ctx.Done()
	return ctx.Err()
}

// BenchmarkFollowColdStart: time from Follow's start to Ready for a set of
// BLOOMGATE_COLD_KEYS keys (default 10 M, Bloom at 0.1 %, default headroom),
// from a local snapshot with nothing to catch up, from the snapshot with
// 100,000 transactions to catch up, and by a full bootstrap from the feed.
// The feed is in memory, so this is the gate's own share of a cold start.
//
//	go test . -run XXX -bench FollowColdStart -benchtime 5x
func BenchmarkFollowColdStart(b *testing.B) {
	n := 10_000_000
	if s := os.Getenv("BLOOMGATE_COLD_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	const base = 1 << 32
	dir := b.TempDir()
	store := DirSnapshots(dir)
	seed := uint64(0x5eed)
	f, err := NewBloom(uint64(float64(n)*(1+DefaultHeadroom)), DefaultFPRate, seed)
	if err != nil {
		b.Fatal(err)
	}
	feed := &benchFeed{n: n, base: base}
	for i := range n {
		f.AddHash(filter.Hash(feed.key(i), seed))
	}
	if err := store.Save(context.Background(), base, func(w io.Writer) error { return writeSnapshot(w, "bench", base, f) }); err != nil {
		b.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		catchUp int
		store   SnapshotStore
	}{
		{"snapshot", 0, store},
		{"snapshot+100k", 100_000, store},
		{"bootstrap", 0, nil},
	} {
		b.Run(tc.name, func(b *testing.B) {
			feed := &benchFeed{n: n, base: base, catchUp: tc.catchUp}
			var total time.Duration
			for b.Loop() {
				src := memfeed.NewSource() // no rows, sized as n
				src.SetEstimate(int64(n))
				g, err := New(Config{Source: src})
				if err != nil {
					b.Fatal(err)
				}
				ctx, cancel := context.WithCancel(context.Background())
				done := make(chan error, 1)
				// No snapshots written on the way out: each run starts
				// from the same one.
				fcfg := FollowConfig{Identity: "bench", Snapshots: readOnly{tc.store}, SnapshotInterval: time.Hour}
				if tc.store == nil {
					fcfg.Snapshots = nil
				}
				start := time.Now()
				go func() { done <- g.Follow(ctx, feed, fcfg) }()
				for !g.Ready() {
					time.Sleep(20 * time.Microsecond)
				}
				total += time.Since(start)
				if tc.store != nil && g.Stats().Builds != 0 {
					b.Fatal("bootstrapped instead of loading the snapshot")
				}
				cancel()
				<-done
				g.Close()
			}
			b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/ready")
		})
	}
}

// readOnly is a SnapshotStore that loads but never saves.
type readOnly struct{ SnapshotStore }

func (r readOnly) Save(context.Context, changefeed.Position, func(io.Writer) error) error { return nil }

// txnFeed is an empty table followed, once start is closed, by b.N
// transactions of inserts new keys each; it closes done when the last
// is applied.
type txnFeed struct {
	inserts     int
	n           int
	start, done chan struct{}
}

func (f *txnFeed) Bootstrap(context.Context, func([]byte) error) (changefeed.Position, error) {
	return 1, nil
}

func (f *txnFeed) Rebuild(context.Context, func([]byte) error) (changefeed.Position, error) {
	return 0, fmt.Errorf("txnFeed: no rebuilds")
}

func (f *txnFeed) Head(context.Context) (changefeed.Position, error)  { return 1, nil }
func (f *txnFeed) Confirm(context.Context, changefeed.Position) error { return nil }

func (f *txnFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	changes := make([]changefeed.Change, f.inserts)
	for i := range changes {
		changes[i] = changefeed.Change{Kind: changefeed.Insert, Key: make([]byte, 0, 32)}
	}
	select {
	case <-f.start:
	case <-ctx.Done():
		return ctx.Err()
	}
	id := 0
	for j := range f.n {
		for i := range changes {
			c := &changes[i]
			c.Key = append(strconv.AppendInt(append(c.Key[:0], "user"...), int64(id), 10), "@example.com"...)
			id++
		}
		pos := changefeed.Position(2*j + 3)
		if err := apply(changefeed.Txn{Commit: pos - 1, End: pos, Changes: changes}); err != nil {
			return err
		}
	}
	close(f.done)
	<-ctx.Done()
	return ctx.Err()
}

// BenchmarkFollowApplyTxn: applying one transaction of 1,000 inserts from
// the change feed to a followed gate's Bloom filter sized for 16 M keys at
// 0.1 % (about 29 MiB, larger than the caches), hashing included. ns/op is
// per transaction; cpu-ns/op the process's CPU time per transaction (the
// transactions are applied on Follow's goroutine), which leaves out time
// spent waiting for a core.
//
//	go test -run '^$' -bench FollowApplyTxn -count 6 .
func BenchmarkFollowApplyTxn(b *testing.B) {
	const inserts = 1000
	g, err := New(Config{Source: memfeed.NewSource(), Capacity: 1 << 24})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	feed := &txnFeed{inserts: inserts, n: b.N, start: make(chan struct{}), done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- g.Follow(ctx, feed, FollowConfig{SnapshotInterval: time.Hour}) }()
	if err := g.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu0 := cpuTime()
	b.ResetTimer()
	close(feed.start)
	select {
	case <-feed.done:
	case err := <-errc:
		b.Fatal(err)
	}
	b.StopTimer()
	b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
	cancel()
	<-errc
	if !g.MayContain([]byte("user0@example.com")) {
		b.Fatal("false negative")
	}
}
