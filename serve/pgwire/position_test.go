package pgwire

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// TestPositionReaderAfter: every caller gets a read that started after it
// called, however many share it, and reads do not overlap.
func TestPositionReaderAfter(t *testing.T) {
	var started, running, reads atomic.Int64
	r := &positionReader{read: func(context.Context) (changefeed.Position, error) {
		n := started.Add(1)
		if running.Add(1) != 1 {
			t.Error("two reads at once")
		}
		time.Sleep(2 * time.Millisecond)
		running.Add(-1)
		reads.Add(1)
		return changefeed.Position(n), nil
	}}
	var wg sync.WaitGroup
	const callers = 200
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait := time.NewTimer(time.Hour)
			wait.Stop()
			for range 5 {
				before := started.Load()
				pos, err := r.after(context.Background(), time.Minute, wait)
				if err != nil {
					t.Error(err)
					return
				}
				if int64(pos) <= before {
					t.Errorf("got read %d, which started before the call (reads started then: %d)", pos, before)
				}
			}
		}()
	}
	wg.Wait()
	if n := reads.Load(); n >= callers*5 {
		t.Errorf("%d reads for %d calls: nothing shared", n, callers*5)
	}
	t.Logf("%d reads for %d calls", reads.Load(), callers*5)
}

// TestWaitPositionWakes: a query waiting for its set to reach a position
// is woken when the set's position changes, not by its timer: with a wait
// longer than the test's, only the wake-up can make it succeed.
func TestWaitPositionWakes(t *testing.T) {
	set := &tableSet{keys: map[string]bool{}}
	set.setLagging(true)
	wait := time.NewTimer(time.Hour)
	wait.Stop()
	done := make(chan bool)
	go func() { done <- waitPosition(context.Background(), set, 1, time.Hour, wait) }()
	time.Sleep(10 * time.Millisecond) // let it wait (it succeeds either way)
	set.setLagging(false)
	if !<-done {
		t.Fatal("waitPosition gave up")
	}
	// Its context still ends the wait.
	set.setLagging(true)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- waitPosition(ctx, set, 1, time.Hour, wait) }()
	cancel()
	if <-done {
		t.Fatal("waitPosition reached a position the set never reached")
	}
	// And its bound.
	if waitPosition(context.Background(), set, 1, time.Millisecond, wait) {
		t.Fatal("waitPosition reached a position the set never reached")
	}
}
