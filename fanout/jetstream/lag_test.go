package jetstream_test

import (
	"context"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func testLogger() *slog.Logger {
	if os.Getenv("BLOOMGATE_FANOUT_DEBUG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// inProcess is a set on a fresh 3-node cluster with a feeder running in
// the test process.
type inProcess struct {
	set        *jetstream.Set
	pg         *fanouttest.PG
	js         js.JetStream
	name       string                // the set's name
	feed       *fanouttest.TimedFeed // the feeder's Feed
	stopFeeder func()
}

func startInProcess(t testing.TB, preRows int, capacity uint64) *inProcess {
	t.Helper()
	pg := fanouttest.NewPG(t, preRows)
	j := sharedJetStream(t) // no test of an inProcess kills a node
	set := openSet(t, jetstream.Config{JetStream: j, Replicas: 3, LeaseTTL: testLeaseTTL, Logger: testLogger()}, "t")
	ctx, cancel := context.WithCancel(context.Background())
	g, err := bloomgate.New(bloomgate.Config{Source: pg.Source, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	feed := &fanouttest.TimedFeed{Feed: pg.Feed(t)}
	fol, err := g.Follower(bloomgate.FollowConfig{Identity: "users.email", SnapshotInterval: time.Minute, MaxLag: testMaxLag})
	if err != nil {
		t.Fatal(err)
	}
	f, err := set.NewFeeder(jetstream.FeederConfig{Feed: feed, Gate: fol, HeartbeatInterval: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	fctx, fcancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { f.Run(fctx); close(done) }()
	t.Cleanup(func() {
		cancel()
		<-done
		g.Close()
	})
	return &inProcess{set: set, pg: pg, js: j, name: set.Backend().Name, feed: feed, stopFeeder: func() { fcancel(); <-done }}
}

// startFeeder starts another feeder on the set, with a gate of its own; it
// runs until stop or the test's end.
func (ip *inProcess) startFeeder(t *testing.T, capacity uint64) (stop func()) {
	t.Helper()
	g, err := bloomgate.New(bloomgate.Config{Source: ip.pg.Source, Capacity: capacity, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	fol, err := g.Follower(bloomgate.FollowConfig{Identity: "users.email", SnapshotInterval: time.Minute, MaxLag: testMaxLag})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ip.set.NewFeeder(jetstream.FeederConfig{Feed: ip.pg.Feed(t), Gate: fol, HeartbeatInterval: testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { f.Run(ctx); close(done) }()
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done; g.Close() }) }
	t.Cleanup(stop)
	return stop
}

// instance starts a gate following the set and returns it with the time
// it took to become ready.
func (ip *inProcess) instance(t testing.TB, capacity uint64) (*bloomgate.Gate, time.Duration) {
	t.Helper()
	g, d, _ := ip.instanceWith(t, capacity, jetstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat})
	return g, d
}

// instanceWith is instance with an InstanceConfig; stop ends its Follow.
func (ip *inProcess) instanceWith(t testing.TB, capacity uint64, icfg jetstream.InstanceConfig) (*bloomgate.Gate, time.Duration, func()) {
	t.Helper()
	start := time.Now()
	g, err := bloomgate.New(bloomgate.Config{Source: ip.pg.Source, Capacity: capacity, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	in, err := ip.set.NewInstance(icfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		g.Follow(ctx, in, bloomgate.FollowConfig{Identity: "users.email", Snapshots: in.Snapshots(), MaxLag: testMaxLag, SnapshotInterval: time.Hour})
		close(done)
	}()
	var once sync.Once
	stop := func() { once.Do(func() { cancel(); <-done; g.Close() }) }
	t.Cleanup(stop)
	testsvc.Eventually(t, time.Minute, g.Ready, "instance not ready")
	return g, time.Since(start), stop
}

// TestLag checks that every row committed at BLOOMGATE_FANOUT_RATE
// inserts/s (default 1000) for BLOOMGATE_FANOUT_SECONDS (default 10), from
// 16 writers, is visible on an instance, and logs the lag (BenchmarkLag
// reports it).
func TestLag(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	ip := startInProcess(t, 1000, 1<<20)
	g, join := ip.instance(t, 1<<20)
	t.Logf("instance ready %v after its start", join.Round(time.Millisecond))
	r := fanouttest.Lag(t, fanouttest.LagConfig{PG: ip.pg, Instance: g, Feed: ip.feed,
		Rate: envInt("BLOOMGATE_FANOUT_RATE", 1000), Duration: time.Duration(envInt("BLOOMGATE_FANOUT_SECONDS", 10)) * time.Second})
	t.Log(r)
	if r.FalseNegatives > 0 {
		t.Fatalf("%d false negatives", r.FalseNegatives)
	}
}

// BenchmarkLag reports commit-to-visible on an instance of a set on a
// 3-node cluster (R3) at ~1 k inserts/s from 16 writers, 10 s per
// iteration: p50-ms and p99-ms from the insert's return, fanout-p50-ms and
// fanout-p99-ms from the feeder's receipt of the row (the fan-out's share),
// db-p50-ms and db-p99-ms from a transaction's commit time to the feeder's
// receipt (the database's share), held-p99-ms the part of the fan-out's
// share spent while the feeder's apply held the feed (see
// fanouttest.TimedFeed).
//
//	go test -run '^$' -bench 'BenchmarkLag$' -benchtime 1x ./fanout/jetstream/
func BenchmarkLag(b *testing.B) {
	ip := startInProcess(b, 1000, 1<<20)
	g, _ := ip.instance(b, 1<<20)
	var r fanouttest.LagResult
	for b.Loop() {
		r = fanouttest.Lag(b, fanouttest.LagConfig{PG: ip.pg, Instance: g, Feed: ip.feed})
		if r.FalseNegatives > 0 {
			b.Fatalf("%d false negatives", r.FalseNegatives)
		}
	}
	b.Log(r)
	fanouttest.ReportLag(b, r)
}
