package serve

import (
	"context"
	"fmt"
	"math"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
)

// Table-backed expiring sets: an expiring key whose items are the rows of a
// table with an expiry column (a revocations table): a set of Config.Sets
// with SetConfig.Expiring. The table is the durable record, so the set is
// neither logged nor snapshotted: it is built from the rows whose expiry is
// ahead at start, and takes BG.XADD from services that call it (before the
// row's transaction commits). Rows written by any other service reach it
// through the table's change feed (ExpiringConfig.Feed) or, without one,
// at the next rescan, every RefreshInterval. Rows drop out when their
// expiry passes, with no delete; a row deleted from the table stays present
// until its expiry (a false positive, never a false negative). Until the
// first scan completes — and, with a feed, while the feed is more than
// MaxLag behind — the set answers present to every lookup.

// ExpiringSource streams the rows of a table whose keys expire, each key
// with its expiry (source/postgres.Expiring, source/sqlite.Expiring).
// Rows already expired may be passed; they are skipped.
type ExpiringSource interface {
	ScanExpiring(ctx context.Context, fn func(key []byte, expiresAt time.Time) error) error
}

// ExpiringFeed is a table's change feed with each inserted row's expiry
// (cmd/bloomgate wraps source/postgres.Feed with a ValueColumn). The set
// only adds: deletes, truncates and unknown deletes are ignored.
type ExpiringFeed interface {
	// BootstrapExpiring (re)starts the feed: it calls fn for every row
	// committed before the returned point, with its expiry (rows already
	// expired may be passed), and Stream from that point delivers every
	// transaction committed after it.
	BootstrapExpiring(ctx context.Context, fn func(key []byte, expiresAt time.Time) error) (changefeed.Position, error)
	// Stream calls apply for every transaction committed after from, and
	// with progress markers, as bloomgate.Feed's Stream; each Insert's
	// Value is the row's expiry, for ParseExpiry.
	Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error
	// Head returns the position of the newest committed transaction now.
	Head(ctx context.Context) (changefeed.Position, error)
	// Confirm tells the feed it may release the transactions up to pos.
	Confirm(ctx context.Context, pos changefeed.Position) error
	// ParseExpiry reads an Insert's Value.
	ParseExpiry(v []byte) (time.Time, error)
	// Err is the feed's last connection error while it retries, else nil.
	Err() error
}

// ExpiringConfig makes a table-backed set (SetConfig.Expiring) an expiring
// one. The zero value of every field but Source, Params.MaxTTL and
// Params.Capacity means its default.
type ExpiringConfig struct {
	// Source streams the rows. Required.
	Source ExpiringSource
	// Params size the filter (see ExpiringParams): MaxTTL must cover the
	// rows' expiries (a row expiring further ahead than MaxTTL can make
	// the set answer present to every lookup until that expiry, logged).
	Params ExpiringParams
	// RefreshInterval is how often the table is scanned again, for rows
	// written without BG.XADD, when the set has no Feed. Default: 1 minute.
	RefreshInterval time.Duration
	// Feed, if set, keeps the set in step with the table instead of
	// rescans: the set is built by Feed.BootstrapExpiring, then takes the
	// stream's rows, and answers from its filter only while every
	// transaction committed more than MaxLag ago has been applied.
	Feed ExpiringFeed
	// MaxLag bounds the staleness of a set with a Feed (see Feed).
	// Default: 30 seconds (bloomgate.DefaultMaxLag).
	MaxLag time.Duration
}

const (
	defaultRefreshInterval = time.Minute
	expiringScanBatch      = 4096
	expiringRetryFirst     = time.Second
)

// expiringTable is the table side of a table-backed expiring set.
type expiringTable struct {
	cfg      ExpiringConfig
	ready    atomic.Bool
	scans    atomic.Uint64 // completed scans
	failures atomic.Uint64 // failed scans (with a Feed: bootstraps and streams)
	rows     atomic.Uint64 // live rows in the last completed scan
	follow   *expiringFollow
}

// openExpiringSet declares the table-backed expiring set name in the
// keyspace; called by openSets after recovery, so a stored key of the same
// name is found. Its table is read by runExpiringTable or runExpiringFeed.
func (s *Store) openExpiringSet(name string, sc ExpiringConfig) error {
	if sc.RefreshInterval == 0 {
		sc.RefreshInterval = defaultRefreshInterval
	}
	p := sc.Params.withDefaults()
	switch {
	case sc.Source == nil:
		return fmt.Errorf("serve: expiring set %q has no source", name)
	case sc.RefreshInterval < 0:
		return fmt.Errorf("serve: expiring set %q: negative refresh interval", name)
	case s.keys[name] != nil:
		return fmt.Errorf("serve: expiring set %q: a set or stored key already has that name", name)
	}
	if err := p.check(); err != nil {
		return fmt.Errorf("serve: expiring set %q: %w", name, err)
	}
	o, err := newObject(name, p, s.cfg.Now)
	if err != nil {
		return fmt.Errorf("serve: expiring set %q: %w", name, err)
	}
	if sc.MaxLag <= 0 {
		sc.MaxLag = bloomgate.DefaultMaxLag
	}
	k := o.key.(*expiringKey) // built from ExpiringParams
	k.table = &expiringTable{cfg: sc}
	if sc.Feed != nil {
		k.table.follow = &expiringFollow{}
	}
	k.failOpenUntil.Store(math.MaxInt64) // until the first scan
	s.keys[name] = o
	s.used.Add(o.bytes)
	return nil
}

// runExpiringSet keeps the expiring set o in step with its table until the
// store stops.
func (s *Store) runExpiringSet(ctx context.Context, o *object) {
	if o.table().follow != nil {
		s.runExpiringFeed(ctx, o)
		return
	}
	s.runExpiringTable(ctx, o)
}

// runExpiringTable scans the table at start (retrying until it succeeds)
// and then every RefreshInterval.
func (s *Store) runExpiringTable(ctx context.Context, o *object) {
	t := o.table()
	retry := expiringRetryFirst
	for {
		err := s.scanExpiringTable(ctx, o)
		wait := t.cfg.RefreshInterval
		switch {
		case ctx.Err() != nil:
			return
		case err != nil && !t.ready.Load():
			t.failures.Add(1)
			s.log.Error("expiring set: first scan failed; answering present to every lookup until one succeeds",
				"set", o.name, "retry_in", retry, "err", err)
			wait, retry = retry, min(2*retry, t.cfg.RefreshInterval)
		case err != nil:
			t.failures.Add(1)
			s.log.Error("expiring set: rescan failed; rows written since the last scan without BG.XADD are not seen yet",
				"set", o.name, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-time.After(wait):
		}
	}
}

// scanExpiringTable adds every row whose expiry is ahead to o's filter.
func (s *Store) scanExpiringTable(ctx context.Context, o *object) error {
	return s.scanExpiring(ctx, o, o.table().cfg.Source.ScanExpiring)
}

// scanExpiring adds every row scan passes whose expiry is ahead to o's
// filter.
func (s *Store) scanExpiring(ctx context.Context, o *object, scan func(context.Context, func([]byte, time.Time) error) error) error {
	k := o.key.(*expiringKey) // a table-backed expiring set's
	t := k.table
	var live uint64
	var unheld int64 // the latest expiry the filter could not hold
	batch := make([]uint64, 0, expiringScanBatch)
	exps := make([]int64, 0, expiringScanBatch)
	flush := func() {
		o.mu.Lock()
		for i, h := range batch {
			if err := k.wf.ReplayHash(h, time.Unix(0, exps[i])); err != nil {
				unheld = max(unheld, exps[i])
			}
		}
		s.remeasure(o)
		o.mu.Unlock()
		batch, exps = batch[:0], exps[:0]
	}
	err := scan(ctx, func(key []byte, exp time.Time) error {
		if exp.Before(s.cfg.Now()) {
			return nil
		}
		live++
		batch = append(batch, k.wf.Hash(key))
		exps = append(exps, exp.UnixNano())
		if len(batch) == expiringScanBatch {
			flush()
		}
		return nil
	})
	flush()
	if unheld != 0 {
		s.failOpenRow(o, unheld)
	}
	if err != nil {
		return err
	}
	t.rows.Store(live)
	t.scans.Add(1)
	if !t.ready.Load() {
		k.failOpenUntil.CompareAndSwap(math.MaxInt64, unheld)
		t.ready.Store(true)
		if t.follow != nil {
			s.log.Info("expiring set scanned; catching up with the change feed", "set", o.name, "live_rows", live)
		} else {
			s.log.Info("expiring set ready", "set", o.name, "live_rows", live)
		}
	}
	return nil
}

// failOpenRow makes o answer present to every lookup until until (Unix
// ns), for a row its filter cannot hold: never forget a row.
func (s *Store) failOpenRow(o *object, until int64) {
	k := o.key.(*expiringKey) // a table-backed expiring set's
	for {
		cur := k.failOpenUntil.Load()
		if cur >= until || k.failOpenUntil.CompareAndSwap(cur, until) {
			break
		}
	}
	s.log.Error("expiring set: a row expires further ahead than the max TTL allows; answering present to every lookup until then",
		"set", o.name, "until", time.Unix(0, until), "max_ttl", k.p.MaxTTL)
}

// expiringSet returns the table-backed expiring set name, or nil.
func (s *Store) expiringSet(name string) *object {
	s.mu.RLock()
	o := s.keys[name]
	s.mu.RUnlock()
	if o == nil || o.table() == nil {
		return nil
	}
	return o
}

// expiringReady: scanned once and, with a feed, fresh.
func (s *Store) expiringReady(o *object) bool {
	t := o.table()
	return t.ready.Load() && (t.follow == nil || s.cfg.Now().UnixNano() <= t.follow.freshUntil.Load())
}

// ExpiringStatus is the part of SetStatus only an expiring set has.
type ExpiringStatus struct {
	Scans    uint64 // completed scans (with a feed: bootstraps)
	Failures uint64 // failed scans (with a feed: failed bootstraps and streams)
	Rows     uint64 // live rows in the last completed scan
}

// expiringStatus is SetStatus of the expiring set o. Ready is false until
// the first scan completes and, with a feed, until the stream has caught up
// with the database's head as of the start, and whenever it falls more than
// MaxLag behind; the set then answers present to every lookup, and Reason
// says why. Mode is ModeFollow with a feed (Role RoleFollower; Lag is the
// age of the newest head it has passed), else ModeRebuild (rescans).
func (s *Store) expiringStatus(o *object) SetStatus {
	t := o.table()
	st := SetStatus{
		Ready:    s.expiringReady(o),
		State:    bloomgate.StateReady,
		Expiring: &ExpiringStatus{Scans: t.scans.Load(), Failures: t.failures.Load(), Rows: t.rows.Load()},
	}
	if !t.ready.Load() {
		st.Reason = "the table has not been scanned yet; every lookup answers present"
	}
	if fl := t.follow; fl != nil {
		st.Mode, st.Role = ModeFollow, RoleFollower
		fl.mu.Lock()
		st.Position = fl.pos
		st.Lag = fl.lagLocked(s.cfg.Now())
		if !st.Ready && st.Reason == "" {
			st.Reason = fl.reasonLocked(st.Lag, t.cfg)
		}
		fl.mu.Unlock()
	}
	if !st.Ready {
		st.State = bloomgate.StateWarming
		if st.Expiring.Scans > 0 {
			st.State = bloomgate.StateDegraded
		}
	}
	return st
}
