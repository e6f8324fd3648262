package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Connect opens a pool for a connection string (URL or key=value).
func Connect(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	if err := pool.Ping(ctx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	return pool, nil
}

// UsersTable is a users(id, email UNIQUE) table: the workload of the
// `bloomgate demo` command and of the gate's integration tests.
type UsersTable struct {
	Pool *pgxpool.Pool
	// Table may be schema-qualified.
	Table string
}

func (u UsersTable) ident() string { return pgx.Identifier(splitQualified(u.Table)).Sanitize() }

// Create creates the table, dropping any previous one.
func (u UsersTable) Create(ctx context.Context) error {
	t := u.ident()
	if _, err := u.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
		return fmt.Errorf("postgres: create %s: %w", u.Table, err)
	}
	if _, err := u.Pool.Exec(ctx, "CREATE TABLE "+t+" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL UNIQUE)"); err != nil {
		return fmt.Errorf("postgres: create %s: %w", u.Table, err)
	}
	return nil
}

// Load inserts users 0..n-1 with e-mail key(i) through COPY FROM, then
// analyses the table so the row estimate is current.
func (u UsersTable) Load(ctx context.Context, n int, key func(i int) string) error {
	row := make([]any, 1)
	_, err := u.Pool.CopyFrom(ctx, pgx.Identifier(splitQualified(u.Table)), []string{"email"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) { row[0] = key(i); return row, nil }))
	if err != nil {
		return fmt.Errorf("postgres: load: %w", err)
	}
	if _, err := u.Pool.Exec(ctx, "ANALYZE "+u.ident()); err != nil {
		return fmt.Errorf("postgres: analyze: %w", err)
	}
	return nil
}

// Insert adds one user and returns its id.
func (u UsersTable) Insert(ctx context.Context, email string) (int64, error) {
	var id int64
	if err := u.Pool.QueryRow(ctx, "INSERT INTO "+u.ident()+" (email) VALUES ($1) RETURNING id", email).Scan(&id); err != nil {
		return 0, fmt.Errorf("postgres: insert: %w", err)
	}
	return id, nil
}

// Delete removes the user with this e-mail.
func (u UsersTable) Delete(ctx context.Context, email string) error {
	if _, err := u.Pool.Exec(ctx, "DELETE FROM "+u.ident()+" WHERE email = $1", email); err != nil {
		return fmt.Errorf("postgres: delete: %w", err)
	}
	return nil
}

// Find returns the id of the user with this e-mail, and whether there is one.
func (u UsersTable) Find(ctx context.Context, email string) (int64, bool, error) {
	var id int64
	err := u.Pool.QueryRow(ctx, "SELECT id FROM "+u.ident()+" WHERE email = $1", email).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("postgres: find: %w", err)
	}
	return id, true, nil
}

// Drop drops the table.
func (u UsersTable) Drop(ctx context.Context) error {
	_, err := u.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+u.ident())
	return err
}

// Source returns a Source over the e-mails.
func (u UsersTable) Source() *Source {
	s, _ := New(Config{Pool: u.Pool, Table: u.Table, Column: "email"}) // cannot fail: both set
	return s
}
