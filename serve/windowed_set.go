package serve

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync/atomic"
	"time"
)

// Table-backed expiring sets: an expiring key whose items are the rows of a
// table with an expiry column (a revocations table), declared in
// Config.ExpiringSets. The table is the durable record, so the set is
// neither logged nor snapshotted: it is built from the rows whose expiry is
// ahead at start, scanned again every RefreshInterval for rows written by
// services that do not BG.XADD, and takes BG.XADD from those that do (call
// it before the row's transaction commits). Rows drop out when their expiry
// passes, with no delete; a row deleted from the table stays present until
// its expiry (a false positive, never a false negative). Until the first
// scan completes the set answers present to every lookup.

// ExpiringSource streams the rows of a table whose keys expire, each key
// with its expiry (source/postgres.Expiring, source/sqlite.Expiring).
// Rows already expired may be passed; they are skipped.
type ExpiringSource interface {
	ScanExpiring(ctx context.Context, fn func(key []byte, expiresAt time.Time) error) error
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
	// written without BG.XADD. Default: 1 minute.
	RefreshInterval time.Duration
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
	failures atomic.Uint64 // failed scans
	rows     atomic.Uint64 // live rows in the last completed scan
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
		o, err := newObject(sc.Name, meta{kind: KindExpiring, expiry: p}, s.cfg.Now)
		if err != nil {
			return fmt.Errorf("serve: expiring set %q: %w", sc.Name, err)
		}
		o.table = &expiringTable{cfg: sc}
		o.failOpenUntil.Store(math.MaxInt64) // until the first scan
		s.keys[sc.Name] = o
		s.used.Add(o.bytes)
	}
	for _, o := range s.keys {
		if o.table != nil {
			s.bgDone.Add(1)
			go func() {
				defer s.bgDone.Done()
				s.runExpiringTable(s.runCtx, o)
			}()
		}
	}
	return nil
}

// runExpiringTable scans the table at start (retrying until it succeeds)
// and then every RefreshInterval.
func (s *Store) runExpiringTable(ctx context.Context, o *object) {
	t := o.table
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
	t := o.table
	var live uint64
	var unheld int64 // the latest expiry the filter could not hold
	batch := make([]uint64, 0, expiringScanBatch)
	exps := make([]int64, 0, expiringScanBatch)
	flush := func() {
		o.mu.Lock()
		for i, h := range batch {
			if err := o.wf.ReplayHash(h, time.Unix(0, exps[i])); err != nil {
				unheld = max(unheld, exps[i])
			}
		}
		s.remeasure(o)
		o.mu.Unlock()
		batch, exps = batch[:0], exps[:0]
	}
	err := t.cfg.Source.ScanExpiring(ctx, func(key []byte, exp time.Time) error {
		if exp.Before(s.cfg.Now()) {
			return nil
		}
		live++
		batch = append(batch, o.wf.Hash(key))
		exps = append(exps, exp.UnixNano())
		if len(batch) == expiringScanBatch {
			flush()
		}
		return nil
	})
	flush()
	if unheld != 0 {
		// Fail open until the row's expiry rather than forget it.
		for {
			cur := o.failOpenUntil.Load()
			if cur >= unheld || o.failOpenUntil.CompareAndSwap(cur, unheld) {
				break
			}
		}
		s.log.Error("expiring set: a row expires further ahead than the max TTL allows; answering present to every lookup until then",
			"set", o.name, "until", time.Unix(0, unheld), "max_ttl", o.meta.expiry.MaxTTL)
	}
	if err != nil {
		return err
	}
	t.rows.Store(live)
	t.scans.Add(1)
	if !t.ready.Load() {
		o.failOpenUntil.CompareAndSwap(math.MaxInt64, unheld)
		t.ready.Store(true)
		s.log.Info("expiring set ready", "set", o.name, "live_rows", live)
	}
	return nil
}

// isExpiringSet reports whether name is a table-backed expiring set.
func (s *Store) isExpiringSet(name string) bool {
	s.mu.RLock()
	o := s.keys[name]
	s.mu.RUnlock()
	return o != nil && o.table != nil
}

// expiringSetsReady reports whether every table-backed expiring set has
// completed its first scan.
func (s *Store) expiringSetsReady() bool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	for _, o := range s.keys {
		if o.table != nil && !o.table.ready.Load() {
			return false
		}
	}
	return true
}

// ExpiringSetStatus is the state of a table-backed expiring set.
type ExpiringSetStatus struct {
	Ready    bool   // the first scan completed
	Scans    uint64 // completed scans
	Failures uint64 // failed scans
	Rows     uint64 // live rows in the last completed scan
}

// ExpiringSet returns the status of the table-backed expiring set name, and
// false when name is not one.
func (s *Store) ExpiringSet(name string) (ExpiringSetStatus, bool) {
	s.mu.RLock()
	o := s.keys[name]
	s.mu.RUnlock()
	if o == nil || o.table == nil {
		return ExpiringSetStatus{}, false
	}
	t := o.table
	return ExpiringSetStatus{Ready: t.ready.Load(), Scans: t.scans.Load(), Failures: t.failures.Load(), Rows: t.rows.Load()}, true
}

// ExpiringSetNames returns the names of the table-backed expiring sets,
// sorted.
func (s *Store) ExpiringSetNames() []string {
	s.mu.RLock()
	var names []string
	for name, o := range s.keys {
		if o.table != nil {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(names)
	return names
}
