package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
)

// UsersTable is a users(id, email UNIQUE) table: the workload of the
// `bloomgate demo` command and of the gate's integration tests.
type UsersTable struct {
	DB    *sql.DB
	Table string
}

// Create creates the table, dropping any previous one.
func (u UsersTable) Create(ctx context.Context) error {
	t := Quote(u.Table)
	_, err := u.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+t+"; CREATE TABLE "+t+
		" (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE)")
	if err != nil {
		return fmt.Errorf("sqlite: create %s: %w", u.Table, err)
	}
	return nil
}

// Load inserts users 0..n-1 with e-mail key(i), in one transaction, 500
// rows per statement.
func (u UsersTable) Load(ctx context.Context, n int, key func(i int) string) error {
	const batch = 500
	tx, err := u.DB.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlite: load: %w", err)
	}
	defer tx.Rollback()
	insert := func(rows int) (*sql.Stmt, error) {
		q := "INSERT INTO " + Quote(u.Table) + " (email) VALUES (?)" + strings.Repeat(",(?)", rows-1)
		return tx.PrepareContext(ctx, q)
	}
	full, err := insert(batch)
	if err != nil {
		return fmt.Errorf("sqlite: load: %w", err)
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
				return fmt.Errorf("sqlite: load: %w", err)
			}
			defer stmt.Close()
		}
		if _, err := stmt.ExecContext(ctx, args...); err != nil {
			return fmt.Errorf("sqlite: load rows %d..%d: %w", i, i+len(args)-1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlite: load: %w", err)
	}
	return nil
}

// Insert adds one user and returns its id.
func (u UsersTable) Insert(ctx context.Context, email string) (int64, error) {
	res, err := u.DB.ExecContext(ctx, "INSERT INTO "+Quote(u.Table)+" (email) VALUES (?)", email)
	if err != nil {
		return 0, fmt.Errorf("sqlite: insert: %w", err)
	}
	return res.LastInsertId()
}

// Delete removes the user with this e-mail.
func (u UsersTable) Delete(ctx context.Context, email string) error {
	if _, err := u.DB.ExecContext(ctx, "DELETE FROM "+Quote(u.Table)+" WHERE email = ?", email); err != nil {
		return fmt.Errorf("sqlite: delete: %w", err)
	}
	return nil
}

// Find returns the id of the user with this e-mail, and whether there is one.
func (u UsersTable) Find(ctx context.Context, email string) (int64, bool, error) {
	var id int64
	err := u.DB.QueryRowContext(ctx, "SELECT id FROM "+Quote(u.Table)+" WHERE email = ?", email).Scan(&id)
	switch {
	case errors.Is(err, sql.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("sqlite: find: %w", err)
	}
	return id, true, nil
}

// Drop drops the table.
func (u UsersTable) Drop(ctx context.Context) error {
	_, err := u.DB.ExecContext(ctx, "DROP TABLE IF EXISTS "+Quote(u.Table))
	return err
}

// Source returns a Source over the e-mails.
func (u UsersTable) Source() *Source {
	s, _ := New(Config{DB: u.DB, Table: u.Table, Column: "email"}) // cannot fail: both set
	return s
}
