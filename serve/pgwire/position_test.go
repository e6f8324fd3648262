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
			for range 5 {
				before := started.Load()
				pos, err := r.after(context.Background())
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
