package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
)

// Table-backed expiring sets: an expiring key whose items are the rows of a
// table with an expiry column (a revocations table), declared in
// Config.ExpiringSets. The table is the durable record, so the set is
// neither logged nor snapshotted: it is built from the rows whose expiry is
// ahead at start, and takes BG.XADD from services that call it (before the
// row's transaction commits). Rows written by any other service reach it
// through the table's change feed (ExpiringSetConfig.Feed) or, without one,
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

// ExpiringSetConfig declares a table-backed expiring set. The zero value of
// every field but Name, Source and Params.MaxTTL and Params.Capacity means
// its default.
type ExpiringSetConfig struct {
	// Name is the key clients use. Required.
	Name string
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
	cfg      ExpiringSetConfig
	ready    atomic.Bool
	scans    atomic.Uint64 // completed scans
	failures atomic.Uint64 // failed scans (with a Feed: bootstraps and streams)
	rows     atomic.Uint64 // live rows in the last completed scan
	follow   *expiringFollow
}

// openExpiringSets declares the table-backed expiring sets; called by Open
// after recovery, so a stored key of the same name is found.
func (s *Store) openExpiringSets() error {
	for _, sc := range s.cfg.ExpiringSets {
		if sc.RefreshInterval == 0 {
			sc.RefreshInterval = defaultRefreshInterval
		}
		p := sc.Params.withDefaults()
		switch {
		case sc.Name == "":
			return errors.New("serve: expiring set without a name")
		case sc.Source == nil:
			return fmt.Errorf("serve: expiring set %q has no source", sc.Name)
		case sc.RefreshInterval < 0:
			return fmt.Errorf("serve: expiring set %q: negative refresh interval", sc.Name)
		case s.sets[sc.Name] != nil || s.keys[sc.Name] != nil:
			return fmt.Errorf("serve: expiring set %q: a set or stored key already has that name", sc.Name)
		}
		if err := p.check(); err != nil {
			return fmt.Errorf("serve: expiring set %q: %w", sc.Name, err)
		}
		o, err := newObject(sc.Name, p, s.cfg.Now)
		if err != nil {
			return fmt.Errorf("serve: expiring set %q: %w", sc.Name, err)
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
		s.keys[sc.Name] = o
		s.used.Add(o.bytes)
	}
	for _, o := range s.keys {
		if o.table() != nil {
			s.bgDone.Add(1)
			go func() {
				defer s.bgDone.Done()
				if o.table().follow != nil {
					s.runExpiringFeed(s.runCtx, o)
					return
				}
				s.runExpiringTable(s.runCtx, o)
			}()
		}
	}
	return nil
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

// isExpiringSet reports whether name is a table-backed expiring set.
func (s *Store) isExpiringSet(name string) bool {
	s.mu.RLock()
	o := s.keys[name]
	s.mu.RUnlock()
	return o != nil && o.table() != nil
}

// expiringSetsReady reports whether every table-backed expiring set answers
// from its filter (see ExpiringSetStatus.Ready).
func (s *Store) expiringSetsReady() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, o := range s.keys {
		if o.table() != nil && !s.expiringReady(o) {
			return false
		}
	}
	return true
}

// expiringReady: scanned once and, with a feed, fresh.
func (s *Store) expiringReady(o *object) bool {
	t := o.table()
	return t.ready.Load() && (t.follow == nil || s.cfg.Now().UnixNano() <= t.follow.freshUntil.Load())
}

// ExpiringSetStatus is the state of a table-backed expiring set.
type ExpiringSetStatus struct {
	// Ready: the set answers "absent" from its filter. It is false until
	// the first scan completes and, with a feed, until the stream has
	// caught up with the database's head as of the start, and whenever it
	// falls more than MaxLag behind; the set then answers present to every
	// lookup, and Reason says why.
	Ready    bool
	Scans    uint64 // completed scans (with a feed: bootstraps)
	Failures uint64 // failed scans (with a feed: failed bootstraps and streams)
	Rows     uint64 // live rows in the last completed scan
	// Follow: the set follows the table's change feed; Position is the
	// feed position applied, Lag how far behind the database's head it is
	// (the age of the newest head it has passed).
	Follow   bool
	Position changefeed.Position
	Lag      time.Duration
	Reason   string // why the set is not Ready; "" when it is
}

// ExpiringSet returns the status of the table-backed expiring set name, and
// false when name is not one.
func (s *Store) ExpiringSet(name string) (ExpiringSetStatus, bool) {
	s.mu.RLock()
	o := s.keys[name]
	s.mu.RUnlock()
	if o == nil || o.table() == nil {
		return ExpiringSetStatus{}, false
	}
	t := o.table()
	st := ExpiringSetStatus{Ready: s.expiringReady(o), Scans: t.scans.Load(), Failures: t.failures.Load(), Rows: t.rows.Load()}
	if !t.ready.Load() {
		st.Reason = "the table has not been scanned yet; every lookup answers present"
	}
	if fl := t.follow; fl != nil {
		st.Follow = true
		fl.mu.Lock()
		st.Position = fl.pos
		st.Lag = fl.lagLocked(s.cfg.Now())
		if !st.Ready && st.Reason == "" {
			st.Reason = fl.reasonLocked(st.Lag, t.cfg)
		}
		fl.mu.Unlock()
	}
	return st, true
}

// ExpiringSetNames returns the names of the table-backed expiring sets,
// sorted.
func (s *Store) ExpiringSetNames() []string {
	s.mu.RLock()
	var names []string
	for name, o := range s.keys {
		if o.table() != nil {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(names)
	return names
}
