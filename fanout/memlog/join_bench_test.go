package memlog_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/memlog"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// countedFeed counts the feeder's reads of the database's head.
type countedFeed struct {
	*memfeed.Feed
	heads atomic.Int64
}

func (c *countedFeed) Head(ctx context.Context) (changefeed.Position, error) {
	c.heads.Add(1)
	return c.Feed.Head(ctx)
}

// BenchmarkInstanceJoin: a new instance's start to ready on a running set
// in one process (memlog, a small snapshot, the default HeartbeatInterval),
// where nearly all of the join is the wait for a head whose read time it
// can bound: the feeder's second read after the instance's first look at
// the heartbeat. It reports ms-ready and the feeder's head reads per join.
//
//	go test -run '^$' -bench InstanceJoin -benchtime 20x ./fanout/memlog/
func BenchmarkInstanceJoin(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	set := memlog.New(memlog.Config{})
	feed := &countedFeed{Feed: memfeed.NewFeed("a", "b", "c")}
	fg, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer fg.Close()
	fol, err := fg.Follower(bloomgate.FollowConfig{Identity: "k", SnapshotInterval: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	f, err := set.NewFeeder(fanout.FeederConfig{Feed: feed, Gate: fol})
	if err != nil {
		b.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { f.Run(ctx) })
	join := func() time.Duration {
		start := time.Now()
		g, err := bloomgate.New(bloomgate.Config{})
		if err != nil {
			b.Fatal(err)
		}
		defer g.Close()
		in, err := set.NewInstance(fanout.InstanceConfig{})
		if err != nil {
			b.Fatal(err)
		}
		ictx, icancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			g.Follow(ictx, in, bloomgate.FollowConfig{Identity: "k", Snapshots: in.Snapshots(), MaxLag: time.Minute, SnapshotInterval: time.Hour})
			close(done)
		}()
		defer func() { icancel(); <-done }()
		for !g.Ready() {
			if time.Since(start) > time.Minute {
				b.Fatal("instance not ready after a minute")
			}
			time.Sleep(100 * time.Microsecond)
		}
		return time.Since(start)
	}
	join() // the feeder's first snapshot is there, its lease and first reads done
	var total time.Duration
	heads := feed.heads.Load()
	for b.Loop() {
		total += join()
	}
	b.ReportMetric(float64(total)/float64(b.N)/float64(time.Millisecond), "ms-ready")
	b.ReportMetric(float64(feed.heads.Load()-heads)/float64(b.N), "head-reads/op")
	b.ReportMetric(0, "ns/op")
}
