package memlog_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/memlog"
	"github.com/bloomgate/bloomgate/internal/memfeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestFeederFollower: a feeder drives its gate through changefeed.Follower
// only: it bootstraps the gate (Builds counts it) and leads until ctx ends.
// Closed while Run leads, or started on a closed gate, Run returns the
// gate's error (bloomgate.ErrClosed, which is changefeed.ErrClosed)
// instead of competing for the lease again.
func TestFeederFollower(t *testing.T) {
	set := memlog.New(memlog.Config{})
	run := func(ctx context.Context, g *bloomgate.Gate) (*fanout.Feeder, chan error) {
		fol, err := g.Follower(bloomgate.FollowConfig{Identity: "k", SnapshotInterval: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		f, err := set.NewFeeder(fanout.FeederConfig{Feed: memfeed.NewFeed("a", "b"), Gate: fol, HeartbeatInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- f.Run(ctx) }()
		return f, done
	}
	wait := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second):
			t.Fatal("Run did not return")
			return nil
		}
	}

	g, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	ctx, cancel := context.WithCancel(context.Background())
	f, done := run(ctx, g)
	testsvc.Eventually(t, 30*time.Second, func() bool { return f.Leading() && g.Ready() }, "feeder not leading with a ready gate")
	if b := g.Stats().Builds; b == 0 {
		t.Errorf("Builds = 0 after the gate's bootstrap")
	}
	cancel()
	if err := wait(done); !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want context.Canceled", err)
	}
	if f.Leading() {
		t.Error("still leading after Run returned")
	}

	// Closed while it leads, with transactions still arriving: Run
	// returns the gate's ErrClosed and stops leading.
	g2, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	fol, err := g2.Follower(bloomgate.FollowConfig{Identity: "k", SnapshotInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	feed := memfeed.NewFeed("a", "b")
	f, err = set.NewFeeder(fanout.FeederConfig{Feed: feed, Gate: fol, HeartbeatInterval: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done = make(chan error, 1)
	go func() { done <- f.Run(context.Background()) }()
	testsvc.Eventually(t, 30*time.Second, func() bool { return f.Leading() && g2.Ready() }, "feeder not leading with a ready gate")
	stop, committed := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(committed)
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			feed.Commit([]string{fmt.Sprint("c", i)}, nil)
		}
	}()
	g2.Close()
	select {
	case err := <-done:
		if !errors.Is(err, bloomgate.ErrClosed) {
			t.Errorf("Run after Close = %v, want bloomgate.ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run still running 10 s after the gate's Close")
	}
	close(stop)
	<-committed
	if f.Leading() {
		t.Error("still leading after Run returned")
	}

	closed, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	closed.Close()
	f, done = run(context.Background(), closed)
	if err := wait(done); !errors.Is(err, bloomgate.ErrClosed) || !errors.Is(err, changefeed.ErrClosed) {
		t.Errorf("Run on a closed gate = %v, want bloomgate.ErrClosed", err)
	}
	if f.Leading() {
		t.Error("still leading after Run returned")
	}
}

// TestFollowerRefusesSnapshots: the feeder gives its gate the store its
// snapshots go to; a FollowConfig that names one is refused.
func TestFollowerRefusesSnapshots(t *testing.T) {
	g, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if _, err := g.Follower(bloomgate.FollowConfig{Snapshots: bloomgate.DirSnapshots(t.TempDir())}); !errors.Is(err, bloomgate.ErrFollowerSnapshots) {
		t.Errorf("Follower with Snapshots = %v, want ErrFollowerSnapshots", err)
	}
}
