// Package memfeed is the in-memory table every test of a gate, a keyspace or
// a server uses when the database itself is not what is tested: a Source of
// keys and a Feed of committed transactions over the same rows, with knobs
// to fail, pause or lose them at chosen points. The real databases are
// tested in source/postgres and source/sqlite.
package memfeed

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrScan is the error of a Scan that FailAt stopped.
var ErrScan = errors.New("connection lost")

// Source is an in-memory table of distinct keys: a changefeed.Source. Scan
// reads a snapshot of the keys in the order they were inserted. It is safe
// for concurrent use.
type Source struct {
	mu       sync.Mutex
	keys     map[string]int // key → index in order
	order    []string
	estimate int64 // -1: len(keys)
	failAt   int
	pauseAt  int
	paused   chan struct{}
	resume   chan struct{}
}

var _ changefeed.Source = (*Source)(nil)

// NewSource returns a table holding keys (a key given twice is held once).
func NewSource(keys ...string) *Source {
	s := &Source{keys: map[string]int{}, estimate: -1}
	for _, k := range keys {
		s.Insert(k)
	}
	return s
}

// NewSourceBytes is NewSource for keys as bytes.
func NewSourceBytes(keys [][]byte) *Source {
	s := NewSource()
	for _, k := range keys {
		s.Insert(string(k))
	}
	return s
}

// Insert adds k to the table.
func (s *Source) Insert(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.keys[k]; !ok {
		s.keys[k] = len(s.order)
		s.order = append(s.order, k)
	}
}

// Delete removes k from the table.
func (s *Source) Delete(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	i, ok := s.keys[k]
	if !ok {
		return
	}
	delete(s.keys, k)
	last := s.order[len(s.order)-1]
	s.order[i] = last
	s.keys[last] = i
	if last == k {
		delete(s.keys, k)
	}
	s.order = s.order[:len(s.order)-1]
}

// Has reports whether k is in the table: the database's answer.
func (s *Source) Has(k string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.keys[k]
	return ok
}

// SetEstimate makes Estimate return n instead of the number of keys.
func (s *Source) SetEstimate(n int64) { s.mu.Lock(); s.estimate = n; s.mu.Unlock() }

// FailAt makes every later Scan fail with ErrScan after delivering n keys
// (0: never).
func (s *Source) FailAt(n int) { s.mu.Lock(); s.failAt = n; s.mu.Unlock() }

// PauseAt makes the next Scan stop after delivering n keys until resume is
// called; paused is closed when it stops there.
func (s *Source) PauseAt(n int) (paused <-chan struct{}, resume func()) {
	p, r := make(chan struct{}), make(chan struct{})
	s.mu.Lock()
	s.pauseAt, s.paused, s.resume = n, p, r
	s.mu.Unlock()
	return p, sync.OnceFunc(func() { close(r) })
}

// Scan implements changefeed.Source over a snapshot of the keys.
func (s *Source) Scan(ctx context.Context, fn func([]byte) error) error {
	s.mu.Lock()
	snap := append([]string(nil), s.order...) // a snapshot, like a database's
	failAt, pauseAt, paused, resume := s.failAt, s.pauseAt, s.paused, s.resume
	s.pauseAt = 0
	s.mu.Unlock()
	for i, k := range snap {
		if failAt > 0 && i == failAt {
			return ErrScan
		}
		if pauseAt > 0 && i == pauseAt {
			close(paused)
			<-resume
		}
		if err := fn([]byte(k)); err != nil {
			return err
		}
	}
	return ctx.Err()
}

// Estimate implements changefeed.Source: the number of keys, or the
// SetEstimate value.
func (s *Source) Estimate(context.Context) (int64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.estimate >= 0 {
		return s.estimate, nil
	}
	return int64(len(s.keys)), nil
}

// Feed is an in-memory table with a commit log: a changefeed.Feed.
// Transaction k (from 1) commits at position 2k and ends at 2k+1; a
// bootstrap or rebuild after it is at 2k+2. It is safe for concurrent use.
type Feed struct {
	mu        sync.Mutex
	cond      *sync.Cond
	rows      map[string]int
	log       []changefeed.Txn
	paused    bool
	lost      bool // Stream fails with ErrRebuild until the next Bootstrap
	confirmed changefeed.Position
	headStuck bool
	boots     int
	rebuilds  int
	bootErr   error
	hold      chan struct{}
}

var _ changefeed.Feed = (*Feed)(nil)

// NewFeed returns a feed over a table holding keys, with an empty log.
func NewFeed(keys ...string) *Feed {
	f := &Feed{rows: map[string]int{}}
	f.cond = sync.NewCond(&f.mu)
	for _, k := range keys {
		f.rows[k]++
	}
	return f
}

// Commit applies a transaction to the table, appends it to the log and
// returns its end.
func (f *Feed) Commit(inserts, deletes []string) changefeed.Position {
	f.mu.Lock()
	defer f.mu.Unlock()
	k := changefeed.Position(len(f.log) + 1)
	t := changefeed.Txn{Commit: 2 * k, End: 2*k + 1}
	for _, key := range inserts {
		f.rows[key]++
		t.Changes = append(t.Changes, changefeed.Change{Kind: changefeed.Insert, Key: []byte(key)})
	}
	for _, key := range deletes {
		if f.rows[key]--; f.rows[key] <= 0 {
			delete(f.rows, key)
		}
		t.Changes = append(t.Changes, changefeed.Change{Kind: changefeed.Delete, Key: []byte(key)})
	}
	f.log = append(f.log, t)
	f.cond.Broadcast()
	return t.End
}

// Lose makes Stream fail with changefeed.ErrRebuild (the position is gone)
// until the next Bootstrap. The inserts, committed but never in the log,
// only a bootstrap sees.
func (f *Feed) Lose(inserts ...string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.lost = true
	for _, k := range inserts {
		f.rows[k]++
	}
	f.cond.Broadcast()
}

// SetPaused holds Stream before its next transaction while p is true.
func (f *Feed) SetPaused(p bool) { f.mu.Lock(); f.paused = p; f.cond.Broadcast(); f.mu.Unlock() }

// SetHeadStuck makes Head block until its context ends, like a stalled
// process.
func (f *Feed) SetHeadStuck(stuck bool) { f.mu.Lock(); f.headStuck = stuck; f.mu.Unlock() }

// SetBootstrapErr makes Bootstrap fail with err while it is not nil.
func (f *Feed) SetBootstrapErr(err error) { f.mu.Lock(); f.bootErr = err; f.mu.Unlock() }

// HoldRebuild makes the next Rebuild wait until release is closed.
func (f *Feed) HoldRebuild(release chan struct{}) { f.mu.Lock(); f.hold = release; f.mu.Unlock() }

// Boots returns how many Bootstraps were called.
func (f *Feed) Boots() int { f.mu.Lock(); defer f.mu.Unlock(); return f.boots }

// Rebuilds returns how many Rebuilds were called.
func (f *Feed) Rebuilds() int { f.mu.Lock(); defer f.mu.Unlock(); return f.rebuilds }

// Confirmed returns the highest position confirmed.
func (f *Feed) Confirmed() changefeed.Position {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.confirmed
}

// Keys returns the keys the table holds, each once, in no order.
func (f *Feed) Keys() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make([]string, 0, len(f.rows))
	for k := range f.rows {
		out = append(out, k)
	}
	return out
}

// Has reports whether the table holds k: the database's answer.
func (f *Feed) Has(k string) bool { f.mu.Lock(); defer f.mu.Unlock(); return f.rows[k] > 0 }

func (f *Feed) snapshot(fn func([]byte) error) (changefeed.Position, error) {
	f.mu.Lock()
	var keys []string
	for k, n := range f.rows {
		for range n {
			keys = append(keys, k)
		}
	}
	pos := changefeed.Position(2*len(f.log) + 2)
	f.mu.Unlock()
	for _, k := range keys {
		if err := fn([]byte(k)); err != nil {
			return 0, err
		}
	}
	return pos, nil
}

// Bootstrap implements changefeed.Feed.
func (f *Feed) Bootstrap(ctx context.Context, fn func([]byte) error) (changefeed.Position, error) {
	f.mu.Lock()
	f.boots++
	f.lost = false
	err := f.bootErr
	f.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return f.snapshot(fn)
}

// Rebuild implements changefeed.Feed.
func (f *Feed) Rebuild(ctx context.Context, fn func([]byte) error) (changefeed.Position, error) {
	f.mu.Lock()
	f.rebuilds++
	hold := f.hold
	f.hold = nil
	f.mu.Unlock()
	if hold != nil {
		<-hold
	}
	return f.snapshot(fn)
}

// Head implements changefeed.Feed: the end of the last transaction.
func (f *Feed) Head(ctx context.Context) (changefeed.Position, error) {
	f.mu.Lock()
	if f.headStuck {
		f.mu.Unlock()
		<-ctx.Done()
		return 0, ctx.Err()
	}
	defer f.mu.Unlock()
	if len(f.log) == 0 {
		return 0, nil
	}
	return f.log[len(f.log)-1].End, nil
}

// Confirm implements changefeed.Feed.
func (f *Feed) Confirm(ctx context.Context, pos changefeed.Position) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.confirmed = max(f.confirmed, pos)
	return nil
}

// Stream implements changefeed.Feed.
func (f *Feed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	stop := context.AfterFunc(ctx, func() { f.mu.Lock(); f.cond.Broadcast(); f.mu.Unlock() })
	defer stop()
	f.mu.Lock()
	defer f.mu.Unlock()
	i := 0
	for i < len(f.log) && f.log[i].End <= from {
		i++
	}
	for {
		for ctx.Err() == nil && !f.lost && (f.paused || i == len(f.log)) {
			f.cond.Wait()
		}
		switch {
		case ctx.Err() != nil:
			return ctx.Err()
		case f.lost:
			return fmt.Errorf("memfeed: slot gone: %w", changefeed.ErrRebuild)
		}
		t := f.log[i]
		i++
		f.mu.Unlock()
		err := apply(t)
		f.mu.Lock()
		if err != nil {
			return err
		}
	}
}
