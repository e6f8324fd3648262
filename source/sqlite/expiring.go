package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"time"
)

// ErrBadExpiringQuery reports an expiring-rows query that does not return a
// key and an expiry, or an expiry that does not read as a time.
var ErrBadExpiringQuery = errors.New("sqlite: expiring query must return two columns, a key and an expiry")

// Expiring streams the rows of a table whose keys expire, such as a
// revocations table, for a table-backed expiring set of bloomgate serve: each
// key with its expiry. The expiry is Unix seconds (an integer or a real), or
// text in RFC 3339 or SQLite's "YYYY-MM-DD HH:MM:SS[.SSS]" (UTC, as
// datetime('now') writes it). It is safe for concurrent use.
type Expiring struct {
	// DB is an open database (see Open). Required.
	DB *sql.DB
	// Table, KeyColumn and ExpiresColumn name the rows: SELECT KeyColumn,
	// ExpiresColumn FROM Table.
	Table, KeyColumn, ExpiresColumn string
	// Query, if set, replaces them: any SELECT returning the key and its
	// expiry.
	Query string
}

func (e Expiring) query() (string, error) {
	switch {
	case e.DB == nil:
		return "", errors.New("sqlite: Expiring.DB is required")
	case e.Query != "":
		return e.Query, nil
	case e.Table != "" && e.KeyColumn != "" && e.ExpiresColumn != "":
		return "SELECT " + quote(e.KeyColumn) + ", " + quote(e.ExpiresColumn) + " FROM " + quote(e.Table), nil
	}
	return "", errors.New("sqlite: set Expiring.Query, or Table, KeyColumn and ExpiresColumn")
}

// ScanExpiring calls fn for every row with a non-NULL key and expiry, in one
// read transaction. Rows already expired are passed too; the caller skips
// them.
func (e Expiring) ScanExpiring(ctx context.Context, fn func(key []byte, expiresAt time.Time) error) error {
	q, err := e.query()
	if err != nil {
		return err
	}
	tx, err := e.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: scan expiring: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, q)
	if err != nil {
		return fmt.Errorf("sqlite: scan expiring: %w", err)
	}
	defer rows.Close()
	if cols, err := rows.Columns(); err != nil || len(cols) != 2 {
		return fmt.Errorf("%w (got %d)", ErrBadExpiringQuery, len(cols))
	}
	var key sql.Null[sql.RawBytes]
	var exp any
	for rows.Next() {
		if err := rows.Scan(&key, &exp); err != nil {
			return fmt.Errorf("sqlite: scan expiring: %w", err)
		}
		if !key.Valid || exp == nil {
			continue
		}
		t, err := expiryTime(exp)
		if err != nil {
			return fmt.Errorf("%w: key %q: %v", ErrBadExpiringQuery, key.V, err)
		}
		if err := fn(key.V, t); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: scan expiring: %w", err)
	}
	return nil
}

// expiryTime reads an expiry column's value.
func expiryTime(v any) (time.Time, error) {
	switch v := v.(type) {
	case int64:
		return time.Unix(v, 0), nil
	case float64:
		if math.IsNaN(v) || math.Abs(v) > 1e15 {
			return time.Time{}, fmt.Errorf("expiry %v", v)
		}
		sec, frac := math.Modf(v)
		return time.Unix(int64(sec), int64(frac*1e9)), nil
	case time.Time:
		return v, nil
	case []byte:
		return parseExpiryText(string(v))
	case string:
		return parseExpiryText(v)
	}
	return time.Time{}, fmt.Errorf("expiry of type %T", v)
}

func parseExpiryText(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02 15:04:05.999999999", "2006-01-02T15:04:05.999999999"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, fmt.Errorf("expiry %q is not a time", s)
}
