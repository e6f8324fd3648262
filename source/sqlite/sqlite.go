// Package sqlite is bloomgate's embedded default: a Source that streams keys
// from an SQLite table through the pure-Go driver modernc.org/sqlite, so the
// gate runs with no server and no cgo. It is the only package that imports
// the driver.
//
// A Source is safe for concurrent use.
package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	_ "modernc.org/sqlite" // registers driver "sqlite"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrBadQuery reports a key query that does not return exactly one column.
var ErrBadQuery = errors.New("sqlite: key query must return exactly one column")

// Open opens (creating if needed) the database file at path with settings
// suited to a gate's workload: WAL journal, a busy timeout, and a pool sized
// for concurrent readers.
func Open(path string) (*sql.DB, error) {
	dsn := "file:" + path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)&_pragma=synchronous(NORMAL)"
	db, err := sql.Open("sqlite", dsn)
	if err != nil {
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	if err := db.Ping(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sqlite: open %s: %w", path, err)
	}
	return db, nil
}

// Config says where the keys are.
type Config struct {
	// DB is an open database (see Open). Required.
	DB *sql.DB
	// Table and Column name the keys: SELECT Column FROM Table.
	Table, Column string
	// Query, if set, replaces Table and Column: any SELECT returning one
	// column. Estimate then counts its rows.
	Query string
}

// Source streams keys from SQLite. It is safe for concurrent use.
type Source struct {
	cfg   Config
	query string
	count string
}

var _ changefeed.Source = (*Source)(nil)

// New validates cfg and returns a Source.
func New(cfg Config) (*Source, error) {
	if cfg.DB == nil {
		return nil, errors.New("sqlite: Config.DB is required")
	}
	s := &Source{cfg: cfg}
	switch {
	case cfg.Query != "":
		s.query = cfg.Query
		s.count = "SELECT count(*) FROM (" + cfg.Query + ")"
	case cfg.Table != "" && cfg.Column != "":
		s.query = "SELECT " + quote(cfg.Column) + " FROM " + quote(cfg.Table)
		s.count = "SELECT count(*) FROM " + quote(cfg.Table)
	default:
		return nil, errors.New("sqlite: set Config.Query or both Table and Column")
	}
	return s, nil
}

// quote quotes an identifier.
func quote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }

// Scan calls fn for every non-NULL key, in its text form (integers as
// decimal). NULL keys cannot be looked up, so they are skipped. The query runs
// in one read transaction, so it sees one consistent snapshot.
func (s *Source) Scan(ctx context.Context, fn func(key []byte) error) error {
	tx, err := s.cfg.DB.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("sqlite: scan: %w", err)
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, s.query)
	if err != nil {
		return fmt.Errorf("sqlite: scan: %w", err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		return fmt.Errorf("sqlite: scan: %w", err)
	}
	if len(cols) != 1 {
		return fmt.Errorf("%w (got %d)", ErrBadQuery, len(cols))
	}
	var key sql.Null[sql.RawBytes]
	for rows.Next() {
		if err := rows.Scan(&key); err != nil {
			return fmt.Errorf("sqlite: scan: %w", err)
		}
		if !key.Valid {
			continue
		}
		if err := fn(key.V); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("sqlite: scan: %w", err)
	}
	return nil
}

// Estimate counts the rows (SQLite keeps no cheaper estimate).
func (s *Source) Estimate(ctx context.Context) (int64, error) {
	var n int64
	if err := s.cfg.DB.QueryRowContext(ctx, s.count).Scan(&n); err != nil {
		return 0, fmt.Errorf("sqlite: estimate: %w", err)
	}
	return n, nil
}
