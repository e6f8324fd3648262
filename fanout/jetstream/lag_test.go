package jetstream_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
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
	name       string // the set's name
	stopFeeder func()
}

func startInProcess(t *testing.T, preRows int, capacity uint64) *inProcess {
	t.Helper()
	cl := testsvc.SharedNATSCluster(t) // no test of an inProcess kills a node
	pg := fanouttest.NewPG(t, preRows)
	ctx, cancel := context.WithCancel(context.Background())
	nc, err := connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var b [4]byte
	crand.Read(b[:])
	var set *jetstream.Set
	testsvc.Eventually(t, time.Minute, func() bool { // the new cluster elects its meta leader meanwhile
		set, err = jetstream.Open(ctx, jetstream.Config{JetStream: j, Set: "t" + hex.EncodeToString(b[:]), Replicas: 3,
			LeaseTTL: testLeaseTTL, Logger: testLogger()})
		return err == nil
	}, "jetstream.Open on a fresh cluster")
	g, err := bloomgate.New(bloomgate.Config{Source: pg.Source, Capacity: capacity})
	if err != nil {
		t.Fatal(err)
	}
	f, err := set.NewFeeder(jetstream.FeederConfig{Feed: pg.Feed(t), Gate: g, HeartbeatInterval: testHeartbeat,
		Follow: bloomgate.FollowConfig{Identity: "users.email", SnapshotInterval: time.Minute, MaxLag: testMaxLag}})
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
		set.Delete(context.Background())
	})
	return &inProcess{set: set, pg: pg, js: j, name: "t" + hex.EncodeToString(b[:]), stopFeeder: func() { fcancel(); <-done }}
}

// startFeeder starts another feeder on the set, with a gate of its own; it
// runs until stop or the test's end.
func (ip *inProcess) startFeeder(t *testing.T, capacity uint64) (stop func()) {
	t.Helper()
	g, err := bloomgate.New(bloomgate.Config{Source: ip.pg.Source, Capacity: capacity, Logger: testLogger()})
	if err != nil {
		t.Fatal(err)
	}
	f, err := ip.set.NewFeeder(jetstream.FeederConfig{Feed: ip.pg.Feed(t), Gate: g, HeartbeatInterval: testHeartbeat,
		Follow: bloomgate.FollowConfig{Identity: "users.email", SnapshotInterval: time.Minute, MaxLag: testMaxLag}})
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
func (ip *inProcess) instance(t *testing.T, capacity uint64) (*bloomgate.Gate, time.Duration) {
	t.Helper()
	g, d, _ := ip.instanceWith(t, capacity, jetstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat})
	return g, d
}

// instanceWith is instance with an InstanceConfig; stop ends its Follow.
func (ip *inProcess) instanceWith(t *testing.T, capacity uint64, icfg jetstream.InstanceConfig) (*bloomgate.Gate, time.Duration, func()) {
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

// TestLag measures commit-to-visible lag on an instance at
// BLOOMGATE_FANOUT_RATE inserts/s (default 1000) for
// BLOOMGATE_FANOUT_SECONDS (default 10), from 16 writers, and checks that
// every row is then present.
func TestLag(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	rate, secs := envInt("BLOOMGATE_FANOUT_RATE", 1000), envInt("BLOOMGATE_FANOUT_SECONDS", 10)
	ip := startInProcess(t, 1000, 1<<20)
	g, join := ip.instance(t, 1<<20)
	t.Logf("instance ready %v after its start", join.Round(time.Millisecond))

	type row struct {
		key   string
		token changefeed.Position
		at    time.Time
	}
	var mu sync.Mutex
	var rows []row
	ctx, stop := context.WithTimeout(context.Background(), time.Duration(secs)*time.Second)
	defer stop()
	var wg sync.WaitGroup
	const writers = 16
	for w := range writers {
		wg.Go(func() {
			tick := time.NewTicker(time.Second * writers / time.Duration(rate))
			defer tick.Stop()
			for n := 0; ctx.Err() == nil; n++ {
				<-tick.C
				key := fmt.Sprintf("w%d-%d@x", w, n)
				tok, err := ip.pg.Insert(ctx, key)
				if err != nil {
					continue
				}
				mu.Lock()
				rows = append(rows, row{key, tok, time.Now()})
				mu.Unlock()
			}
		})
	}
	var lags []time.Duration
	var pending []row
	next := 0
	poll := func() {
		pos := g.Position()
		now := time.Now()
		mu.Lock()
		pending = append(pending, rows[next:]...)
		next = len(rows)
		mu.Unlock()
		kept := pending[:0]
		for _, r := range pending {
			if r.token <= pos {
				lags = append(lags, now.Sub(r.at))
			} else {
				kept = append(kept, r)
			}
		}
		pending = kept
	}
	for ctx.Err() == nil {
		poll()
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	testsvc.Eventually(t, time.Minute, func() bool { poll(); return len(pending) == 0 }, "the instance did not apply every row")
	fn := 0
	for _, r := range rows {
		if !g.MayContain([]byte(r.key)) {
			fn++
		}
	}
	slices.Sort(lags)
	n := len(lags)
	t.Logf("%d rows in %ds (%.0f/s): commit-to-visible p50 %v p99 %v max %v; %d false negatives",
		n, secs, float64(n)/float64(secs), lags[n/2].Round(100*time.Microsecond), lags[n*99/100].Round(100*time.Microsecond),
		lags[n-1].Round(100*time.Microsecond), fn)
	if fn > 0 {
		t.Fatalf("%d false negatives", fn)
	}
}
