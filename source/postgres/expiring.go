package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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
	case e.Pool == nil:
		return "", errors.New("postgres: Expiring.Pool is required")
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
	q, err := e.query()
	if err != nil {
		return err
	}
	rows, err := e.Pool.Query(ctx, q)
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
