package redisstream_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/redisstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

const (
	testMaxLag    = 2 * time.Second
	testHeartbeat = 100 * time.Millisecond
)

// openSet opens a set with a random name on the shared Redis
// (testsvc.Redis) and deletes its keys afterwards.
func openSet(t *testing.T) (*redisstream.Set, *redis.Client, string) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testsvc.Redis(t)})
	t.Cleanup(func() { c.Close() })
	var b [4]byte
	crand.Read(b[:])
	name := "t" + hex.EncodeToString(b[:])
	set, err := redisstream.Open(context.Background(), redisstream.Config{Client: c, Set: name, LeaseTTL: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { set.Delete(context.Background()) })
	return set, c, name
}

// runFeeder runs a feeder in the test process until the returned stop.
func runFeeder(t *testing.T, set *redisstream.Set, pg *fanouttest.PG, id string) (stop func()) {
	t.Helper()
	g, err := bloomgate.New(bloomgate.Config{Source: pg.Source, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	f, err := set.NewFeeder(redisstream.FeederConfig{Source: pg.Feed(t), Gate: g, ID: id, HeartbeatInterval: testHeartbeat,
		Follow: bloomgate.FollowConfig{Identity: "users.email", SnapshotInterval: 2 * time.Second, MaxLag: testMaxLag}})
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

// instance follows the set; it returns once the gate is ready.
func instance(t *testing.T, set *redisstream.Set, pg *fanouttest.PG) (*bloomgate.Gate, time.Duration) {
	t.Helper()
	start := time.Now()
	g, err := bloomgate.New(bloomgate.Config{Source: pg.Source, Capacity: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	in, err := set.NewInstance(redisstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		g.Follow(ctx, in, bloomgate.FollowConfig{Identity: "users.email", Snapshots: in.Snapshots(), MaxLag: testMaxLag, SnapshotInterval: time.Hour})
		close(done)
	}()
	t.Cleanup(func() { cancel(); <-done; g.Close() })
	for !g.Ready() {
		time.Sleep(time.Millisecond)
	}
	return g, time.Since(start)
}

// TestRedisFanout: two feeders (the holder is stopped halfway and the other
// takes over), two instances (one joins halfway from the snapshot), ~1k
// inserts/s; every row is then present on both, and the lag is reported.
func TestRedisFanout(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	set, c, name := openSet(t)
	pg := fanouttest.NewPG(t, 10000)
	stopA := runFeeder(t, set, pg, "A")
	g1, join := instance(t, set, pg)
	t.Logf("first instance ready after %v (includes the feeder's bootstrap)", join.Round(time.Millisecond))
	runFeeder(t, set, pg, "B")

	type row struct {
		key   string
		token changefeed.Position
		at    time.Time
	}
	var mu sync.Mutex
	var rows []row
	ctx, stop := context.WithTimeout(context.Background(), 8*time.Second)
	defer stop()
	var wg sync.WaitGroup
	for w := range 16 {
		wg.Go(func() {
			tick := time.NewTicker(16 * time.Millisecond)
			defer tick.Stop()
			for n := 0; ctx.Err() == nil; n++ {
				<-tick.C
				key := fmt.Sprintf("w%d-%d@x", w, n)
				tok, err := pg.Insert(ctx, key)
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
		pos := g1.Position()
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
	handedOver, joined := false, false
	var g2 *bloomgate.Gate
	start := time.Now()
	for ctx.Err() == nil {
		poll()
		if !handedOver && time.Since(start) > 3*time.Second {
			handedOver = true
			holder, _ := c.Get(ctx, "bg:{"+name+"}:lease").Result()
			t.Logf("stopping the lease holder %q", holder)
			stopA()
		}
		if !joined && time.Since(start) > 5*time.Second {
			joined = true
			var d time.Duration
			g2, d = instance(t, set, pg)
			t.Logf("second instance ready after %v (snapshot from Redis, then the stream's tail)", d.Round(time.Millisecond))
		}
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	for poll(); len(pending) > 0; poll() {
		time.Sleep(time.Millisecond)
	}
	var final changefeed.Position
	for _, r := range rows {
		final = max(final, r.token)
	}
	for g2.Position() < final {
		time.Sleep(time.Millisecond)
	}
	fn := 0
	for _, g := range []*bloomgate.Gate{g1, g2} {
		for _, r := range rows {
			if !g.MayContainAt([]byte(r.key), r.token) || !g.MayContain([]byte(r.key)) {
				fn++
			}
		}
	}
	slices.Sort(lags)
	n := len(lags)
	t.Logf("%d rows (%.0f/s): commit-to-visible p50 %v p99 %v max %v; %d lookups, %d false negatives", n, float64(n)/8,
		lags[n/2].Round(100*time.Microsecond), lags[n*99/100].Round(100*time.Microsecond), lags[n-1].Round(100*time.Microsecond), 4*len(rows), fn)
	if fn > 0 {
		t.Fatalf("%d false negatives", fn)
	}
}

// A trimmed stream (Redis trims silently) is detected from the batches'
// previous positions: Stream reports an error wrapping ErrRebuild.
func TestRedisTrimmedIsRebuild(t *testing.T) {
	set, c, name := openSet(t)
	pg := fanouttest.NewPG(t, 100)
	runFeeder(t, set, pg, "A")
	g, _ := instance(t, set, pg)
	var tok changefeed.Position
	insert := func(prefix string) {
		for i := range 20 {
			var err error
			if tok, err = pg.Insert(context.Background(), fmt.Sprintf("%s%d@x", prefix, i)); err != nil {
				t.Fatal(err)
			}
			time.Sleep(2 * time.Millisecond) // separate batches
		}
		for g.Position() < tok {
			time.Sleep(time.Millisecond)
		}
	}
	insert("a")
	old := g.Position()
	insert("b")
	if err := c.XTrimMaxLen(context.Background(), "bg:{"+name+"}:log", 1).Err(); err != nil {
		t.Fatal(err)
	}
	in, err := set.NewInstance(redisstream.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = in.Stream(ctx, old, func(changefeed.Txn) error { return nil })
	if !errors.Is(err, changefeed.ErrRebuild) || !errors.Is(err, fanout.ErrGap) {
		t.Fatalf("Stream from a trimmed position: %v, want ErrGap wrapping ErrRebuild", err)
	}
	t.Logf("Stream from a trimmed position: %v", err)
}
