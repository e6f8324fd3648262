package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrBadExpiringQuery reports an expiring-rows query that does not return a
// key and an expiry.
var ErrBadExpiringQuery = errors.New("postgres: expiring query must return two columns, a key and an expiry (timestamptz)")

// Expiring streams the rows of a table whose keys expire, such as a
// revocations table, for a table-backed expiring set of bloomgate serve: each
// key with its expiry, rows already expired left out. It is safe for
// concurrent use.
type Expiring struct {
	// Pool is the connection pool to use. Required.
	Pool *pgxpool.Pool
	// Table, KeyColumn and ExpiresColumn name the rows: SELECT KeyColumn,
	// ExpiresColumn FROM Table WHERE ExpiresColumn > now(). The expiry
	// column is a timestamptz (or timestamp, read as UTC). Table may be
	// schema-qualified.
	Table, KeyColumn, ExpiresColumn string
	// Query, if set, replaces them: any SELECT returning the key (text) and
	// its expiry (timestamptz), such as one converting a Unix-seconds
	// column with to_timestamp.
	Query string
}

func (e Expiring) query() (string, error) {
	switch {
	case e.Query != "":
		return e.Query, nil
	case e.Table != "" && e.KeyColumn != "" && e.ExpiresColumn != "":
		exp := pgx.Identifier{e.ExpiresColumn}.Sanitize()
		return "SELECT " + pgx.Identifier{e.KeyColumn}.Sanitize() + "::text, " + exp +
			" FROM " + pgx.Identifier(splitQualified(e.Table)).Sanitize() + " WHERE " + exp + " > now()", nil
	}
	return "", errors.New("postgres: set Expiring.Query, or Table, KeyColumn and ExpiresColumn")
}

// ScanExpiring calls fn for every row with a non-NULL key and expiry, from
// one snapshot of the table.
func (e Expiring) ScanExpiring(ctx context.Context, fn func(key []byte, expiresAt time.Time) error) error {
	if e.Pool == nil {
		return errors.New("postgres: Expiring.Pool is required")
	}
	return e.scan(ctx, e.Pool, fn)
}

// ScanExpiringTx is ScanExpiring in tx (Feed.BootstrapTx's), Pool unused.
func (e Expiring) ScanExpiringTx(ctx context.Context, tx pgx.Tx, fn func(key []byte, expiresAt time.Time) error) error {
	return e.scan(ctx, tx, fn)
}

// Bootstrap creates f's slot and scans the rows with their expiries under
// the slot's exported snapshot (Feed.BootstrapTx, ScanExpiringTx; Pool
// unused), so that the scan holds exactly the transactions the stream
// does not. It returns the position the stream continues from.
func (e Expiring) Bootstrap(ctx context.Context, f *Feed, fn func(key []byte, expiresAt time.Time) error) (changefeed.Position, error) {
	return f.BootstrapTx(ctx, func(ctx context.Context, tx pgx.Tx) error { return e.scan(ctx, tx, fn) })
}

// CheckPublishesUpdates refuses a publication that does not publish
// updates, read over Pool: an UPDATE that moves a row's expiry later would
// be missed, and the row answered absent once its old expiry passed.
func (e Expiring) CheckPublishesUpdates(ctx context.Context, publication string) error {
	if e.Pool == nil {
		return errors.New("postgres: Expiring.Pool is required")
	}
	var updates bool
	if err := e.Pool.QueryRow(ctx, "SELECT pubupdate FROM pg_publication WHERE pubname = $1", publication).Scan(&updates); err != nil {
		return fmt.Errorf("publication %s: %w", publication, err)
	}
	if !updates {
		return fmt.Errorf("publication %s does not publish updates: an UPDATE moving an expiry later would be missed; "+
			"ALTER PUBLICATION %s SET (publish = 'insert, update, delete, truncate'), or set \"follow no\" for rescan-only", publication, publication)
	}
	return nil
}

func (e Expiring) scan(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
}, fn func(key []byte, expiresAt time.Time) error) error {
	q, err := e.query()
	if err != nil {
		return err
	}
	rows, err := db.Query(ctx, q)
	if err != nil {
		return fmt.Errorf("postgres: scan expiring: %w", err)
	}
	defer rows.Close()
	if n := len(rows.FieldDescriptions()); n != 2 {
		return fmt.Errorf("%w (got %d)", ErrBadExpiringQuery, n)
	}
	var key *string
	var exp *time.Time
	for rows.Next() {
		if err := rows.Scan(&key, &exp); err != nil {
			return fmt.Errorf("%w: %v", ErrBadExpiringQuery, err)
		}
		if key == nil || exp == nil {
			continue
		}
		if err := fn([]byte(*key), *exp); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("postgres: scan expiring: %w", err)
	}
	return nil
}

// ErrBadTimestamp reports text that is not a timestamptz as a server with
// DateStyle ISO writes it.
var ErrBadTimestamp = errors.New("postgres: not an ISO timestamp")

// ParseTimestamptz parses a timestamptz (or timestamp, read as UTC) in
// PostgreSQL's ISO text output, as a feed with a ValueColumn delivers it:
// "2026-12-01 13:00:00+00", with optional fractional seconds and a zone
// offset of hours, minutes and seconds ("+05:30", "-03:00:17"). "infinity"
// is returned as the latest time.Time the package time formats; other
// forms (BC dates, "-infinity") are ErrBadTimestamp.
func ParseTimestamptz(b []byte) (time.Time, error) {
	s := string(b)
	if s == "infinity" {
		return time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC), nil
	}
	for _, layout := range [...]string{
		"2006-01-02 15:04:05.999999999Z07", "2006-01-02 15:04:05.999999999Z07:00",
		"2006-01-02 15:04:05.999999999Z07:00:00", "2006-01-02 15:04:05.999999999",
	} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("%w: %q", ErrBadTimestamp, s)
}
