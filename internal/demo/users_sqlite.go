package demo

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"

	"github.com/bloomgate/bloomgate/source/sqlite"
)

// SQLiteUsers is a users(id, email UNIQUE) table: the workload of the
// `bloomgate demo` command and of the gate's integration tests.
type SQLiteUsers struct {
	DB    *sql.DB
	Table string
}

// Create creates the table, dropping any previous one.
func (u SQLiteUsers) Create(ctx context.Context) error {
	t := sqliteQuote(u.Table)
	_, err := u.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+t+"; CREATE TABLE "+t+
		" (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE)")
	if err != nil {
		return fmt.Errorf("demo: create %s: %w", u.Table, err)
	}
	return nil
}

// Load inserts users 0..n-1 with e-mail key(i), in one transaction, 500
// rows per statement.
func (u SQLiteUsers) Load(ctx context.Context, n int, key func(i int) string) error {
	const batch = 500
	tx, err := u.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("demo: load: %w", err)
	}
	defer tx.Rollback()
	insert := func(rows int) (*sql.Stmt, error) {
		q := "INSERT INTO " + sqliteQuote(u.Table) + " (email) VALUES (?)" + strings.Repeat(",(?)", rows-1)
		return tx.PrepareContext(ctx, q)
	}
	full, err := insert(batch)
	if err != nil {
		return fmt.Errorf("demo: load: %w", err)
	}
	defer full.Close()
	args := make([]any, 0, batch)
	for i := 0; i < n; i += batch {
		args = args[:0]
		for j := i; j < min(i+batch, n); j++ {
			args = append(args, key(j))
		}
		stmt := full
		if len(args) < batch {
			if stmt, err = insert(len(args)); err != nil {
				return fmt.Errorf("demo: load: %w", err)
			}
			defer stmt.Close()
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("demo: load rows %d..%d: %w", i, i+len(args)-1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("demo: load: %w", err)
	}
	return nil
}

// Insert adds one user and returns its id.
func (u SQLiteUsers) Insert(ctx context.Context, email string) (int64, error) {
	res, err := u.DB.ExecContext(ctx, "INSERT INTO "+sqliteQuote(u.Table)+" (email) VALUES (?)", email)
	if err != nil {
		return 0, fmt.Errorf("demo: insert: %w", err)
	}
	return res.LastInsertId()
}

// Delete removes the user with this e-mail.
func (u SQLiteUsers) Delete(ctx context.Context, email string) error {
	if _, err := u.DB.ExecContext(ctx, "DELETE FROM "+sqliteQuote(u.Table)+" WHERE email = ?", email); err != nil {
		return fmt.Errorf("demo: delete: %w", err)
	}
	return nil
}

// Find returns the id of the user with this e-mail, and whether there is one.
func (u SQLiteUsers) Find(ctx context.Context, email string) (int64, bool, error) {
	var id int64
	err := u.DB.QueryRowContext(ctx, "SELECT id FROM "+sqliteQuote(u.Table)+" WHERE email = ?", email).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("demo: find: %w", err)
	}
	return id, true, nil
}

// Drop drops the table.
func (u SQLiteUsers) Drop(ctx context.Context) error {
	_, err := u.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+sqliteQuote(u.Table))
	return err
}

// Source returns a Source over the e-mails.
func (u SQLiteUsers) Source() *sqlite.Source {
	s, _ := sqlite.New(sqlite.Config{DB: u.DB, Table: u.Table, Column: "email"}) // cannot fail: both set
	return s
}

// sqliteQuote quotes an identifier.
func sqliteQuote(name string) string { return `"` + strings.ReplaceAll(name, `"`, `""`) + `"` }
