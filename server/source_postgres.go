package server

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
)

func init() {
	registerSource(SourcePostgres, sourceDriver{name: "postgres", open: openPostgres, positions: postgres.LSN})
}

// openPostgres connects a set's PostgreSQL table. Its change feed is
// opened (and checked: wal_level, the publication) by the returned feed
// functions, only for sets that follow it.
//
// A set that follows the feed opens it (its own connection and checks)
// at once, beside the pool's connection rather than after it: the two are
// independent, and each costs a backend's start on the server.
func openPostgres(ctx context.Context, s *SetConfig, log *slog.Logger) (*openedSource, error) {
	timeout := s.connectTimeout()
	early := startFeed(ctx, s, log)
	cctx, cancel := context.WithTimeout(ctx, timeout)
	pool, err := postgres.Connect(cctx, s.Source.DSN)
	cancel()
	if err != nil {
		early.discard()
		return nil, fmt.Errorf("set %q: postgres: %w", s.Name, timeoutHint(err, cctx, timeout))
	}
	o := &openedSource{closers: []func(){pool.Close}}
	src := s.Source
	if s.expiring() {
		exp := postgres.Expiring{Pool: pool, Table: src.Table, KeyColumn: src.Column, ExpiresColumn: s.Expiring.ExpiresColumn, Query: src.Query}
		o.expiring = exp
		o.expiringFeed = func(ctx context.Context) (serve.ExpiringFeed, func(), error) {
			feed, err := early.get(ctx, s, log)
			if err != nil {
				return nil, func() {}, err
			}
			closeFeed := func() {
				dropExpiringSlot(feed, log)
				feed.Close()
			}
			cctx, cancel := context.WithTimeout(ctx, timeout)
			err = exp.CheckPublishesUpdates(cctx, feed.Publication())
			cancel()
			if err != nil {
				return nil, closeFeed, fmt.Errorf("set %q: %w", s.Name, timeoutHint(err, cctx, timeout))
			}
			return expiringFeed{Feed: feed, scan: postgres.Expiring{Table: src.Table, KeyColumn: src.Column, ExpiresColumn: s.Expiring.ExpiresColumn}}, closeFeed, nil
		}
		return o, nil
	}
	pg, err := postgres.New(postgres.Config{Pool: pool, Query: src.Query, Table: src.Table, Column: src.Column})
	if err != nil {
		early.discard()
		pool.Close()
		return nil, fmt.Errorf("set %q: %w", s.Name, err)
	}
	o.source = pg
	if src.Confirm != "" {
		c := postgres.Confirm{Pool: pool, Query: src.Confirm}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		err := c.Check(cctx)
		cancel()
		if err != nil {
			early.discard()
			pool.Close()
			return nil, fmt.Errorf("set %q: confirm: %w", s.Name, timeoutHint(err, cctx, timeout))
		}
		o.confirm = c
	}
	o.feed = func(ctx context.Context) (bloomgate.Feed, func(), error) {
		feed, err := early.get(ctx, s, log)
		if err != nil {
			return nil, func() {}, err
		}
		return feed, func() { feed.Close() }, nil
	}
	return o, nil
}

// earlyFeed is a set's change feed being opened beside its pool.
type earlyFeed struct {
	done chan struct{}
	feed *postgres.Feed
	err  error
}

// startFeed starts opening the change feed of a set that will need it (it
// follows, and is not a fan-out instance only); nil otherwise.
func startFeed(ctx context.Context, s *SetConfig, log *slog.Logger) *earlyFeed {
	_, fanned := transports[s.Fanout.Transport]
	if !s.follows() || fanned && !s.feeder() {
		return nil
	}
	e := &earlyFeed{done: make(chan struct{})}
	go func() {
		defer close(e.done)
		e.feed, e.err = openFeed(ctx, s, log)
	}()
	return e
}

// get returns the feed started early, or opens it now.
func (e *earlyFeed) get(ctx context.Context, s *SetConfig, log *slog.Logger) (*postgres.Feed, error) {
	if e == nil {
		return openFeed(ctx, s, log)
	}
	<-e.done
	return e.feed, e.err
}

// discard closes the feed started early, once it is open.
func (e *earlyFeed) discard() {
	if e == nil {
		return
	}
	<-e.done
	if e.feed != nil {
		e.feed.Close()
	}
}

// openFeed returns the set's PostgreSQL change feed after checking, within
// the set's connect timeout, that the server answers, that wal_level is
// logical and that the publication covers the table.
func openFeed(ctx context.Context, s *SetConfig, log *slog.Logger) (*postgres.Feed, error) {
	timeout := s.connectTimeout()
	d := s.Source
	fc := postgres.FeedConfig{ConnString: d.DSN, Table: d.Table, Column: d.Column,
		Slot: s.Feed.Slot, Publication: s.Feed.Publication, Timeout: timeout, Logger: log}
	if s.expiring() {
		fc.ValueColumn = s.Expiring.ExpiresColumn
	}
	feed, err := postgres.NewFeed(fc)
	if err != nil {
		return nil, fmt.Errorf("set %q: postgres: %w", s.Name, err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	plan, err := feed.Setup(cctx, postgres.SetupOptions{})
	if err != nil && plan.WALLevel != "" && plan.CheckWALLevel() != nil {
		// wal_level is the first thing to fix: say that, not what a
		// publication on this server would need next.
		err = nil
	}
	if err != nil {
		feed.Close()
		return nil, fmt.Errorf("set %q: postgres: %w", s.Name, timeoutHint(err, cctx, timeout))
	}
	// The advice must make the names this set looks for: its slot names
	// its publication too unless publication is given.
	setupCmd := fmt.Sprintf("bloomgate feed setup -postgres URL -table %s -column %s", d.Table, d.Column)
	if s.Feed.Slot != "" {
		setupCmd += " -slot " + s.Feed.Slot
	}
	if s.Feed.Publication != "" {
		setupCmd += " -publication " + s.Feed.Publication
	}
	pubName := feed.Publication()
	if s.Feed.Slot != "" && s.Feed.Publication == "" {
		pubName += " (named after the set's slot; the publication key names another)"
	}
	only, notSeen := "rebuild-only", "rows written by others are not seen until a rebuild"
	if s.expiring() {
		only, notSeen = "rescan-only", "rows written without BG.XADD are not seen until a rescan"
	}
	if err := plan.CheckWALLevel(); err != nil {
		feed.Close()
		return nil, fmt.Errorf(`set %q: follow: the change feed needs wal_level = logical, the server has %q: `+
			`run %s to see what to change, or set "follow no" for %s (%s)`,
			s.Name, plan.WALLevel, setupCmd, only, notSeen)
	}
	if len(plan.Statements) > 0 {
		feed.Close()
		return nil, fmt.Errorf(`set %q: publication: %s is missing or does not cover %s: run %s -run `+
			`(as a superuser or the table's owner), or set "follow no" for %s`,
			s.Name, pubName, d.Table, setupCmd, only)
	}
	return feed, nil
}

// expiringFeed is a PostgreSQL change feed with the expiry column as its
// value column, for serve.ExpiringFeed.
type expiringFeed struct {
	*postgres.Feed
	scan postgres.Expiring // Table, KeyColumn and ExpiresColumn; no Pool
}

// BootstrapExpiring creates the slot and scans the rows with their expiries
// under the slot's snapshot (Feed.BootstrapTx).
func (f expiringFeed) BootstrapExpiring(ctx context.Context, fn func([]byte, time.Time) error) (changefeed.Position, error) {
	return f.scan.Bootstrap(ctx, f.Feed, fn)
}

func (expiringFeed) ParseExpiry(v []byte) (time.Time, error) { return postgres.ParseTimestamptz(v) }

var _ serve.ExpiringFeed = expiringFeed{}

// dropExpiringSlot drops a followed expiring set's slot at a clean stop
// (the store is closed, so its stream is over): every start creates a new
// one, and one left behind would hold WAL until then. After a crash the
// next start drops it.
func dropExpiringSlot(feed *postgres.Feed, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for {
		err := feed.DropSlot(ctx) // fails while the server still holds the walsender
		if err == nil {
			return
		}
		select {
		case <-ctx.Done():
			log.Warn("expiring set: could not drop the replication slot; the next start drops it", "slot", feed.Slot(), "err", err)
			return
		case <-time.After(100 * time.Millisecond):
		}
	}
}
