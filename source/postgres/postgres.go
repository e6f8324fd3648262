// Package postgres streams a table's keys out of PostgreSQL for a bloomgate
// Gate, with COPY (query) TO STDOUT through pgx (Source), and follows the
// table's changes through logical replication with pglogrepl (Feed). It is
// the only package that imports pgx and pglogrepl.
//
// # Change feed
//
// A Feed needs wal_level = logical, a publication of the table without a
// row filter, a replica identity PostgreSQL can use for the application's
// UPDATE and DELETE, and a role with REPLICATION and SELECT: `bloomgate feed
// setup` prints the SQL. What it guarantees, with the tests that pin it:
//
//   - Exact bootstrap: the keys Bootstrap delivers plus the transactions
//     Stream delivers from its position equal the table, each key once
//     (TestFeedBootstrapExact: writers before, during and after, one
//     transaction open across slot creation).
//   - Order: Stream delivers whole committed transactions (never rolled-back
//     ones), in WAL order, with strictly increasing Txn.End; within one
//     Stream, reconnections neither repeat nor skip one (TestFeedBootstrapExact
//     kills the walsender mid-stream).
//   - Exactly once per acknowledgment: after Confirm(p) has reached the
//     server and a restart, Stream(p) delivers exactly the transactions after
//     p; the ones a previous run delivered but never confirmed come again with
//     the same End, Commit and Changes, so a consumer can recognise them
//     (TestFeedResumeAfterKill).
//   - No silent gap: Stream refuses a position older than the slot's
//     confirmed_flush_lsn (ErrStalePosition) and a missing or invalidated
//     slot (ErrSlotLost); both wrap ErrRebuild (TestFeedResumeAfterKill,
//     TestFeedSlotLost, TestFeedSlotInvalidated).
//   - Deletes and key updates: reported as Delete with the old key when the
//     replica identity covers the key column (REPLICA IDENTITY USING INDEX on
//     its unique index, which needs NOT NULL, or FULL); otherwise as
//     UnknownDelete, never guessed (TestFeedReplicaIdentity, TestDecoder).
//   - Rebuild while streaming: Rebuild's COPY holds exactly the transactions
//     with Commit below its point (TestFeedRebuildWhileStreaming).
//   - Malformed replication messages are errors (ErrProtocol), never panics
//     (FuzzDecoder).
//   - Least privilege: the role setup creates (LOGIN REPLICATION, USAGE on
//     the schema, SELECT on the table) bootstraps, streams, rebuilds and
//     reads the slot's status (TestSetupRoleFollows).
//   - Setup never breaks the application: on a table without a usable
//     replica identity it refuses (ErrReplicaIdentity) unless the operator
//     picks one (SetupOptions.Identity), and the application's UPDATE and
//     DELETE keep working after each choice (TestSetupKeepsAppWrites).
//   - One name per table: default slot and publication names come from the
//     table as the server resolves it (TestNamesMeet).
//   - Bounded waits: every connection and query the feed makes ends within
//     FeedConfig.Timeout with an error wrapping changefeed.ErrTimeout when
//     the server does not answer; errors an operator must fix wrap
//     changefeed.ErrSetup (TestFeedTimeouts).
//
// A slot holds WAL until its position is confirmed: set
// max_slot_wal_keep_size, export SlotStatus.RetainedBytes as a gauge, and
// alert on WALStatus. Before PostgreSQL 17 a logical slot does not survive
// failover to a physical standby; the feed then reports ErrSlotLost.
//
// A Source is safe for concurrent use, and so are Feed's Confirm, Health and
// SlotStatus while a Stream runs (see Feed). docs/operations.md describes the
// setup, permissions and slot monitoring.
package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrBadQuery reports a key query that does not return exactly one column.
var ErrBadQuery = errors.New("postgres: key query must return exactly one column")

// Config says where the keys are.
type Config struct {
	// Pool is the connection pool to use. Required.
	Pool *pgxpool.Pool
	// Table and Column name the keys: COPY (SELECT Column FROM Table).
	// Table may be schema-qualified ("app.users").
	Table, Column string
	// Query, if set, replaces Column: any SELECT returning one column.
	// Table is then optional and used only for the row estimate.
	Query string
	// Parallel is how many COPY streams a build runs at once over Table
	// (ScanParts, parallel.go), capped at Pool's MaxConns minus one.
	// Default: GOMAXPROCS. 1 streams the table as one COPY.
	Parallel int
}

// Source streams keys from PostgreSQL. It is safe for concurrent use.
type Source struct {
	cfg   Config
	query string
	table string // sanitised, or "" when unknown
}

var _ changefeed.Source = (*Source)(nil)

// New validates cfg and returns a Source.
func New(cfg Config) (*Source, error) {
	if cfg.Pool == nil {
		return nil, errors.New("postgres: Config.Pool is required")
	}
	s := &Source{cfg: cfg}
	if cfg.Table != "" {
		s.table = pgx.Identifier(splitQualified(cfg.Table)).Sanitize()
	}
	switch {
	case cfg.Query != "":
		s.query = cfg.Query
	case cfg.Table != "" && cfg.Column != "":
		s.query = "SELECT " + pgx.Identifier{cfg.Column}.Sanitize() + " FROM " + s.table
	default:
		return nil, errors.New("postgres: set Config.Query, or Table and Column")
	}
	return s, nil
}

func splitQualified(name string) []string {
	for i := range len(name) {
		if name[i] == '.' {
			return []string{name[:i], name[i+1:]}
		}
	}
	return []string{name}
}

// Scan streams the keys with COPY (query) TO STDOUT, which PostgreSQL serves
// from one snapshot far faster than a cursor. Keys arrive in their text form;
// NULL keys cannot be looked up, so they are skipped. Decoding runs on a
// goroutine of its own while the connection receives, so fn is called from
// that goroutine (one call at a time), not from Scan's caller.
func (s *Source) Scan(ctx context.Context, fn func(key []byte) error) error {
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: scan: %w", err)
	}
	defer conn.Release()
	pc := conn.Conn().PgConn()
	desc, err := pc.Prepare(ctx, "", s.query, nil)
	if err != nil {
		return fmt.Errorf("postgres: scan: %w", err)
	}
	if len(desc.Fields) != 1 {
		return fmt.Errorf("%w (got %d)", ErrBadQuery, len(desc.Fields))
	}
	return copyKeys(ctx, pc, "COPY ("+s.query+") TO STDOUT", fn)
}

// copyKeys runs a COPY … TO STDOUT of one column and calls fn for every
// non-NULL value, decoding on a goroutine of its own (see pipeline). fn's
// error is returned as it is.
func copyKeys(ctx context.Context, pc *pgconn.PgConn, sql string, fn func([]byte) error) error {
	d := &copyDecoder{fn: fn}
	p := newPipeline(d)
	_, err := pc.CopyTo(ctx, p, sql)
	perr := p.close()
	switch {
	case d.err != nil:
		return d.err
	case err != nil:
		return fmt.Errorf("postgres: copy: %w", err)
	case perr != nil:
		return perr
	}
	return d.finish()
}

// Estimate returns the planner's row estimate (pg_class.reltuples) for Table,
// or count(*) when the table has never been analysed, or when only Query is
// set.
func (s *Source) Estimate(ctx context.Context) (int64, error) {
	var n float64
	if s.table != "" {
		err := s.cfg.Pool.QueryRow(ctx, "SELECT coalesce((SELECT reltuples FROM pg_class WHERE oid = to_regclass($1)), -1)", s.table).Scan(&n)
		if err != nil {
			return 0, fmt.Errorf("postgres: estimate: %w", err)
		}
		if n > 0 {
			return int64(n), nil
		}
	}
	var c int64
	if err := s.cfg.Pool.QueryRow(ctx, "SELECT count(*) FROM ("+s.query+") q").Scan(&c); err != nil {
		return 0, fmt.Errorf("postgres: estimate: %w", err)
	}
	return c, nil
}
