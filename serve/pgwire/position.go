package pgwire

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// positionReader reads the database's WAL insert position for queries
// that arrived before the read started: a read already under way when a
// query arrives may predate a commit the query must see, so that query
// waits for the next read, which every query arriving meanwhile shares.
// One read runs at a time (single-flight), so the database sees at most one
// such read per round trip however many queries arrive.
type positionReader struct {
	read func(ctx context.Context) (changefeed.Position, error)

	mu      sync.Mutex
	next    *positionRead // the read not yet started; arrivals join it
	running bool
}

type positionRead struct {
	done chan struct{}
	pos  changefeed.Position
	err  error
}

// errPositionTimeout: the read a query waited for took longer than
// Config.PositionTimeout.
var errPositionTimeout = errors.New("pgwire: reading the insert position timed out")

// after returns a position read that started after the call did. It waits
// at most timeout for it, on wait (the caller's stopped timer, left
// stopped).
func (r *positionReader) after(ctx context.Context, timeout time.Duration, wait *time.Timer) (changefeed.Position, error) {
	r.mu.Lock()
	if r.next == nil {
		r.next = &positionRead{done: make(chan struct{})}
	}
	w := r.next
	if !r.running {
		r.running = true
		go r.loop()
	}
	r.mu.Unlock()
	select {
	case <-w.done:
		return w.pos, w.err
	default:
	}
	wait.Reset(timeout)
	defer wait.Stop()
	select {
	case <-w.done:
		return w.pos, w.err
	case <-wait.C:
		return 0, errPositionTimeout
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func (r *positionReader) loop() {
	for {
		r.mu.Lock()
		w := r.next
		if w == nil {
			r.running = false
			r.mu.Unlock()
			return
		}
		r.next = nil // later arrivals wait for the read after this one
		r.mu.Unlock()
		// The read is not bound to any one waiter's context: others share
		// it. Its bound is the read function's own (a context made for
		// each read would cost allocations per read); a waiter gives up
		// after Config.PositionTimeout, and the next read waits for this
		// one (see Statement.ReadPosition).
		w.pos, w.err = r.read(context.Background())
		close(w.done)
	}
}
