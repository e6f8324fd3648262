package cli

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"

	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

// A set of kind expiring is a table-backed expiring set (serve.ExpiringSetConfig):
//
//	set revoked {
//	  postgres postgres://app@127.0.0.1:5432/app
//	  kind expiring
//	  table revocations
//	  column jti
//	  expires-column expires_at   # timestamptz (PostgreSQL); Unix seconds or text (SQLite)
//	  max-ttl 24h                 # required: the furthest expiry ahead
//	  capacity 1000000            # revocations per max TTL
//	  fp-rate 0.001
//	  generations 8
//	  max-lag 30s                 # the change feed's staleness bound
//	}
//
// With postgres it follows the table's change feed, expiry column included
// (serve.ExpiringFeed; slot, publication and max-lag as for other followed
// sets). With "follow no" (required for sqlite) it rescans the table every
// rebuild-interval instead, and may take, instead of table, column and
// expires-column, a query returning the key and its expiry.

func (s *setDecl) applyExpiring(l confLine) error {
	switch l.key {
	case "expires-column":
		s.ExpiresColumn = l.value
	case "max-ttl":
		d, err := l.duration()
		if err != nil {
			return err
		}
		s.MaxTTL = d
	case "generations":
		g, err := strconv.Atoi(l.value)
		if err != nil || g < 2 || g > 64 {
			return l.errorf("want an integer from 2 to 64")
		}
		s.Generations = g
	}
	return nil
}

// checkExpiring checks the keys that belong to kind expiring, and only to it
// (check does the rest: "follow no" for sqlite and for a query).
func (s *setDecl) checkExpiring() error {
	if s.Kind != "expiring" {
		if s.ExpiresColumn != "" || s.MaxTTL != 0 || s.Generations != 0 {
			return fmt.Errorf("line %s: set %q: expires-column, max-ttl and generations need kind expiring", s.Line, s.Name)
		}
		return nil
	}
	switch {
	case s.MaxTTL == 0:
		return fmt.Errorf("line %s: set %q: kind expiring needs max-ttl", s.Line, s.Name)
	case s.Capacity == 0:
		return fmt.Errorf("line %s: set %q: kind expiring needs capacity (revocations per max-ttl)", s.Line, s.Name)
	case s.Query == "" && s.ExpiresColumn == "":
		return fmt.Errorf("line %s: set %q: kind expiring needs expires-column, or a query returning the key and its expiry", s.Line, s.Name)
	case s.Confirm != "" || s.Normalize != "":
		return fmt.Errorf("line %s: set %q: kind expiring takes no confirm or normalize", s.Line, s.Name)
	case s.Fanout != "":
		return fmt.Errorf("line %s: set %q: kind expiring takes no fanout", s.Line, s.Name)
	case s.Follow && s.Postgres != "" && s.RebuildInterval != 0:
		return fmt.Errorf("line %s: set %q: rebuild-interval: an expiring set that follows the change feed never rescans; "+
			"remove it, or set \"follow no\" for rescan-only (rows written without BG.XADD are not seen until a rescan)", s.Line, s.Name)
	case s.SnapshotInterval != 0:
		return fmt.Errorf("line %s: set %q: kind expiring takes no snapshot-interval (it is rebuilt from the table at every start)", s.Line, s.Name)
	}
	return nil
}

// openExpiringSets connects the sources of the sets of kind expiring. The
// returned func closes them.
func openExpiringSets(ctx context.Context, decls []setDecl, log *slog.Logger) ([]serve.ExpiringSetConfig, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var out []serve.ExpiringSetConfig
	for _, d := range decls {
		if d.Kind != "expiring" {
			continue
		}
		sc := serve.ExpiringSetConfig{
			Name: d.Name,
			Params: serve.ExpiringParams{MaxTTL: d.MaxTTL, Capacity: d.Capacity, ErrorRate: d.FPRate,
				Generations: d.Generations},
			RefreshInterval: d.RebuildInterval,
		}
		switch {
		case d.Postgres != "":
			timeout := orDefault(d.ConnectTimeout, defaultConnectTimeout)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			pool, err := postgres.Connect(cctx, d.Postgres)
			cancel()
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: postgres: %w", d.Name, timeoutHint(err, cctx, timeout))
			}
			closers = append(closers, pool.Close)
			sc.Source = postgres.Expiring{Pool: pool, Table: d.Table, KeyColumn: d.Column, ExpiresColumn: d.ExpiresColumn, Query: d.Query}
			if !d.Follow {
				break
			}
			feed, err := openFeed(ctx, d, timeout, log)
			if err != nil {
				return nil, closeAll, err
			}
			closers = append(closers, func() {
				dropExpiringSlot(feed, log.With("set", d.Name))
				feed.Close()
			})
			cctx, cancel = context.WithTimeout(ctx, timeout)
			err = checkPublishesUpdates(cctx, pool, feed.Publication())
			cancel()
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: %w", d.Name, timeoutHint(err, cctx, timeout))
			}
			sc.Feed = expiringFeed{Feed: feed, scan: postgres.Expiring{Table: d.Table, KeyColumn: d.Column, ExpiresColumn: d.ExpiresColumn}}
			sc.MaxLag = d.MaxLag
		default:
			db, err := sqlite.Open(d.SQLite)
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: %w", d.Name, err)
			}
			closers = append(closers, func() { db.Close() })
			sc.Source = sqlite.Expiring{DB: db, Table: d.Table, KeyColumn: d.Column, ExpiresColumn: d.ExpiresColumn, Query: d.Query}
		}
		out = append(out, sc)
	}
	return out, closeAll, nil
}

// checkPublishesUpdates refuses a publication without updates: an UPDATE
// that moves a row's expiry later would be missed, and the row answered
// absent once its old expiry passed.
func checkPublishesUpdates(ctx context.Context, pool *pgxpool.Pool, pub string) error {
	var updates bool
	if err := pool.QueryRow(ctx, "SELECT pubupdate FROM pg_publication WHERE pubname = $1", pub).Scan(&updates); err != nil {
		return fmt.Errorf("publication %s: %w", pub, err)
	}
	if !updates {
		return fmt.Errorf("publication %s does not publish updates: an UPDATE moving an expiry later would be missed; "+
			"ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'), or set \"follow no\" for rescan-only", pub, pub)
	}
	return nil
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
	return f.BootstrapTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return f.scan.ScanExpiringTx(ctx, tx, fn) })
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
