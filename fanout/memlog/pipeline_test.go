package memlog_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/memlog"
	"github.com/bloomgate/bloomgate/internal/memfeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// faultyLog pipelines appends to a memlog Log as a connection to a server
// would: sent in order, stored by one worker in that order. Every 7th
// send is lost (nothing stored, an error answered) and every 11th answer
// is lost (the entry stored, an error answered).
type faultyLog struct {
	fanout.Log
	jobs            chan job
	sends           atomic.Int64
	dropped, noAcks atomic.Int64
}

type job struct {
	after fanout.Cursor
	data  []byte
	done  chan error
}

var _ fanout.AsyncAppender = (*faultyLog)(nil)

func newFaultyLog(ctx context.Context, l fanout.Log) *faultyLog {
	f := &faultyLog{Log: l, jobs: make(chan job, 64)}
	go func() {
		for {
			var j job
			select {
			case <-ctx.Done():
				return
			case j = <-f.jobs:
			}
			switch k := f.sends.Add(1); {
			case k%7 == 0:
				f.dropped.Add(1)
				j.done <- errors.New("faulty: send lost")
			case k%11 == 0:
				_, err := f.Log.Append(ctx, j.after, j.data)
				if err == nil {
					f.noAcks.Add(1)
					err = errors.New("faulty: answer lost")
				}
				j.done <- err
			default:
				_, err := f.Log.Append(ctx, j.after, j.data)
				j.done <- err
			}
		}
	}()
	return f
}

func (f *faultyLog) AppendAsync(ctx context.Context, after fanout.Cursor, data []byte) (fanout.Cursor, <-chan error, error) {
	var seq uint64
	if after != "" {
		var err error
		if seq, err = strconv.ParseUint(string(after), 10, 64); err != nil {
			return "", nil, err
		}
	}
	done := make(chan error, 1)
	f.jobs <- job{after, data, done}
	return fanout.Cursor(strconv.FormatUint(seq+1, 10)), done, nil
}

// TestPipelinedAppendFailures: a feeder whose pipelined appends fail now
// and then (sends lost, answers lost) appends every transaction once, in
// order, confirms none the log does not hold, and never starts a new
// history; an instance applies every row.
func TestPipelinedAppendFailures(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	set := memlog.New(memlog.Config{})
	b := set.Backend()
	flog := newFaultyLog(ctx, b.Log)
	b.Log = flog
	mf := memfeed.NewFeed("pre0", "pre1")
	// Every Confirm is checked against what the log holds at that time.
	feed := &checkedFeed{Feed: mf, log: set.Backend().Log}
	fg, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer fg.Close()
	fol, err := fg.Follower(bloomgate.FollowConfig{Identity: "k", SnapshotInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fanout.NewFeeder(b, fanout.FeederConfig{Feed: feed, Gate: fol, HeartbeatInterval: 20 * time.Millisecond,
		PublishTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	wg.Go(func() { f.Run(ctx) })
	ig, err := bloomgate.New(bloomgate.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer ig.Close()
	in, err := set.NewInstance(fanout.InstanceConfig{})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		ig.Follow(ctx, in, bloomgate.FollowConfig{Identity: "k", Snapshots: in.Snapshots(), MaxLag: time.Minute, SnapshotInterval: time.Hour})
	})
	testsvc.Eventually(t, 30*time.Second, ig.Ready, "instance not ready")

	var keys []string
	var last changefeed.Position
	for i := range 400 {
		k := fmt.Sprintf("k%d", i)
		keys = append(keys, k)
		last = mf.Commit([]string{k}, nil)
		if i%10 == 0 {
			time.Sleep(time.Millisecond) // batches of different sizes
		}
	}
	testsvc.Eventually(t, 30*time.Second, func() bool { return ig.Position() >= last }, "instance did not reach %v", last)
	for _, k := range keys {
		if !ig.MayContain([]byte(k)) {
			t.Fatalf("false negative: %s", k)
		}
	}
	if flog.dropped.Load() == 0 || flog.noAcks.Load() == 0 {
		t.Fatalf("no faults injected (%d sends lost, %d answers lost)", flog.dropped.Load(), flog.noAcks.Load())
	}
	if n := mf.Boots(); n != 1 {
		t.Fatalf("%d bootstraps: the feeder started a new history", n)
	}
	// The log holds each transaction once, in order, each batch
	// continuing from the one before it.
	var prev changefeed.Position
	entries := 0
	err = set.Backend().Log.Read(ctx, "", func(e fanout.Entry) error {
		bt, err := fanout.DecodeBatch(e.Data, nil)
		if err != nil {
			return err
		}
		if entries > 0 && bt.Prev != prev {
			return fmt.Errorf("entry %s continues from %v, the one before ended at %v", e.Cursor, bt.Prev, prev)
		}
		prev = bt.End()
		entries++
		if prev >= last {
			return errDone
		}
		return nil
	})
	if !errors.Is(err, errDone) {
		t.Fatal(err)
	}
	if bad := feed.bad.Load(); bad != nil {
		t.Fatal(*bad)
	}
	t.Logf("%d entries; %d sends, %d lost, %d answers lost", entries, flog.sends.Load(), flog.dropped.Load(), flog.noAcks.Load())
}

var errDone = errors.New("done")

// checkedFeed fails the test when a position is confirmed that the log
// does not hold.
type checkedFeed struct {
	*memfeed.Feed
	log fanout.Log
	bad atomic.Pointer[string]
}

func (c *checkedFeed) Confirm(ctx context.Context, pos changefeed.Position) error {
	last, _, err := c.log.Last(ctx)
	if err == nil && last.Data != nil {
		if b, err := fanout.DecodeBatch(last.Data, nil); err == nil && b.End() < pos {
			bad := fmt.Sprintf("confirmed %v, the log ends at %v", pos, b.End())
			c.bad.CompareAndSwap(nil, &bad)
		}
	}
	return c.Feed.Confirm(ctx, pos)
}
