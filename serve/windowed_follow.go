package serve

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/freshness"
)

// A table-backed expiring set with a Feed follows the table's change feed.
// Its items only ever get added (an expiry passing is the only removal), so
// the whole machinery is: bootstrap, stream, and a freshness deadline.
//
// Zero false negatives rests on two facts:
//
//  1. Nothing falls between the bootstrap and the stream. BootstrapExpiring
//     creates the slot first (its consistent point P) and scans the table
//     under the slot's own exported snapshot, which holds exactly the
//     transactions committed before P; Stream from P delivers exactly
//     those committed after it. A transaction open across the start is in
//     one or the other (source/postgres TestExpiringFeed, cmd/bloomgate TestExpiringFollow). Rows seen twice (a
//     rescan after a restart of the feed) are added twice: harmless.
//  2. The set answers from its filter only while fresh: the watcher reads
//     the database's head H at time a (a before the read, so every
//     transaction committed before a ends at or before H); once the
//     applied position passes H the set is fresh until a+MaxLag. A lookup
//     answered "absent" at time n ≤ a+MaxLag has therefore every row
//     committed before n-MaxLag ≤ a applied. A stalled or failed stream
//     passes no new head, so the deadline runs out by itself and the set
//     fails open, with no timer on the lookup path.
//
// A row the filter cannot hold (expiring beyond the max TTL), a NULL or
// unreadable expiry, or an update whose key the feed did not resend, makes
// the set answer present to every lookup until that row's expiry (for an
// unknown one: the max TTL from now), logged: never forget a row.
//
// Positions are confirmed to the feed as soon as a transaction's rows are in
// the filter: the filter is in memory and rebuilt from the table at every
// start (a new slot each time), so no later run needs the WAL before it.

// expiringFollow is the feed side of a table-backed expiring set.
type expiringFollow struct {
	freshUntil atomic.Int64 // Unix ns by the store's clock; 0: not fresh

	mu      sync.Mutex
	pos     changefeed.Position // applied
	heads   freshness.Tracker   // head reads (the invariant: internal/freshness)
	headErr error
	feedErr error // the last Stream or bootstrap error, nil while streaming
	fresh   bool  // as of the last watch tick, for the log
}

const (
	expiringFeedRetryFirst = time.Second
	expiringFeedRetryMax   = 30 * time.Second
)

// runExpiringFeed bootstraps and follows the feed until ctx is done,
// starting again (a new bootstrap) after every failure.
func (s *Store) runExpiringFeed(ctx context.Context, o *object) {
	t, fl := o.table(), o.table().follow
	retry := expiringFeedRetryFirst
	for {
		streamed, err := s.followExpiring(ctx, o)
		if ctx.Err() != nil {
			return
		}
		t.failures.Add(1)
		fl.freshUntil.Store(0)
		fl.mu.Lock()
		fl.heads.Reset()
		fl.feedErr, fl.fresh = err, false
		fl.mu.Unlock()
		if streamed {
			retry = expiringFeedRetryFirst
		}
		s.log.Error("expiring set: change feed stopped; answering present to every lookup until it is back",
			"set", o.name, "retry_in", retry, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, expiringFeedRetryMax)
	}
}

// followExpiring bootstraps the set from the feed and applies its stream
// until it fails; streamed reports that the bootstrap succeeded.
func (s *Store) followExpiring(ctx context.Context, o *object) (streamed bool, err error) {
	t, fl := o.table(), o.table().follow
	feed := t.cfg.Feed
	var start changefeed.Position
	err = s.scanExpiring(ctx, o, func(ctx context.Context, fn func([]byte, time.Time) error) error {
		var err error
		start, err = feed.BootstrapExpiring(ctx, fn)
		return err
	})
	if err != nil {
		return false, fmt.Errorf("bootstrap: %w", err)
	}
	fl.mu.Lock()
	fl.heads.Reset()
	fl.pos, fl.feedErr = start, nil
	fl.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// The head as of the start: the set turns ready once it is passed.
	s.markExpiringHead(sctx, o)
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.watchExpiringFeed(sctx, o)
	}()
	err = feed.Stream(sctx, start, func(txn changefeed.Txn) error { return s.applyExpiringTxn(ctx, o, txn) })
	cancel()
	<-done
	return true, fmt.Errorf("stream: %w", err)
}

// applyExpiringTxn adds a transaction's inserted rows, then records its
// position and confirms it.
func (s *Store) applyExpiringTxn(ctx context.Context, o *object, txn changefeed.Txn) error {
	k := o.key.(*expiringKey) // a table-backed expiring set's
	t, fl := k.table, k.table.follow
	now := s.cfg.Now()
	var unheld int64
	if len(txn.Changes) > 0 {
		o.mu.Lock()
		for _, c := range txn.Changes {
			if c.Kind != changefeed.Insert {
				continue // the set only adds; a delete leaves the row until its expiry
			}
			var exp time.Time
			var err error
			if c.Value == nil {
				err = fmt.Errorf("no expiry (NULL)")
			} else {
				exp, err = t.cfg.Feed.ParseExpiry(c.Value)
			}
			if err == nil && c.Key == nil {
				err = fmt.Errorf("the feed did not say which key")
			}
			if err != nil {
				// Unknown expiry or key: fail open for the longest any row
				// may live.
				until := now.Add(k.p.MaxTTL).UnixNano()
				unheld = max(unheld, until)
				s.log.Error("expiring set: a row from the change feed has no usable key or expiry; answering present to every lookup for the max TTL",
					"set", o.name, "key", string(c.Key), "expiry", string(c.Value), "err", err, "until", time.Unix(0, until))
				continue
			}
			if exp.Before(now) {
				continue
			}
			if err := k.wf.ReplayHash(k.wf.Hash(c.Key), exp); err != nil {
				unheld = max(unheld, exp.UnixNano())
			}
		}
		s.remeasure(o)
		o.mu.Unlock()
	}
	if unheld != 0 {
		s.failOpenRow(o, unheld)
	}
	fl.mu.Lock()
	fl.pos = txn.End
	s.passHeadsLocked(o)
	fl.mu.Unlock()
	// The filter is rebuilt from the table at every start: the rows up to
	// End are as durable as the set needs.
	return t.cfg.Feed.Confirm(ctx, txn.End)
}

// passHeadsLocked moves the freshness deadline past every head read the
// applied position has reached.
func (s *Store) passHeadsLocked(o *object) {
	fl := o.table().follow
	if fl.heads.Advance(fl.pos) {
		m, _ := fl.heads.Passed()
		fl.freshUntil.Store(m.At.Add(o.table().cfg.MaxLag).UnixNano())
	}
}

// lagLocked is the age of the newest head read passed; 0 before one.
func (fl *expiringFollow) lagLocked(now time.Time) time.Duration {
	lag, _ := fl.heads.Lag(now)
	return lag
}

// markExpiringHead reads the database's head, noting the time before the
// read.
func (s *Store) markExpiringHead(ctx context.Context, o *object) {
	fl := o.table().follow
	at := s.cfg.Now()
	head, err := o.table().cfg.Feed.Head(ctx)
	fl.mu.Lock()
	defer fl.mu.Unlock()
	fl.headErr = err
	if err != nil {
		return
	}
	fl.heads.Mark(freshness.Mark{At: at, Head: head})
	s.passHeadsLocked(o)
}

// watchExpiringFeed reads the head regularly, so that a stalled stream
// turns the set not ready within about MaxLag, and logs each change of
// freshness.
func (s *Store) watchExpiringFeed(ctx context.Context, o *object) {
	t, fl := o.table(), o.table().follow
	tick := time.NewTicker(min(max(t.cfg.MaxLag/4, 10*time.Millisecond), time.Second))
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		s.markExpiringHead(ctx, o)
		fresh := s.expiringReady(o)
		fl.mu.Lock()
		was := fl.fresh
		fl.fresh = fresh
		lag := fl.lagLocked(s.cfg.Now())
		reason := fl.reasonLocked(lag, t.cfg)
		fl.mu.Unlock()
		switch {
		case fresh && !was:
			s.log.Info("expiring set ready: following the change feed", "set", o.name, "lag", lag)
		case !fresh && was:
			s.log.Warn("expiring set: answering present to every lookup", "set", o.name, "reason", reason)
		}
	}
}

// reasonLocked says why a followed set is not fresh.
func (fl *expiringFollow) reasonLocked(lag time.Duration, cfg ExpiringConfig) string {
	reason := "change feed: catching up with the database's head as of the start; every lookup answers present"
	if _, passed := fl.heads.Passed(); passed {
		reason = fmt.Sprintf("change feed: lag %v exceeds max-lag %v; every lookup answers present", lag.Round(time.Millisecond), cfg.MaxLag)
	}
	if fl.feedErr != nil {
		reason += "; " + fl.feedErr.Error()
	}
	if fl.headErr != nil {
		reason += "; head: " + fl.headErr.Error()
	}
	if err := cfg.Feed.Err(); err != nil {
		reason += "; " + err.Error()
	}
	return reason
}
