package demo

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/source/postgres"
)

// PostgresUsers is a users(id, email UNIQUE) table: the workload of the
// `bloomgate demo` command and of the gate's integration tests.
type PostgresUsers struct {
	Pool *pgxpool.Pool
	// Table may be schema-qualified.
	Table string
}

func (u PostgresUsers) ident() string { return pgx.Identifier(strings.Split(u.Table, ".")).Sanitize() }

// Create creates the table, dropping any previous one.
func (u PostgresUsers) Create(ctx context.Context) error {
	t := u.ident()
	if _, err := u.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+t); err != nil {
		return fmt.Errorf("demo: create %s: %w", u.Table, err)
	}
	if _, err := u.Pool.Exec(ctx, "CREATE TABLE "+t+" (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL UNIQUE)"); err != nil {
		return fmt.Errorf("demo: create %s: %w", u.Table, err)
	}
	return nil
}

// Load inserts users 0..n-1 with e-mail key(i) through COPY FROM, then
// analyses the table so the row estimate is current.
func (u PostgresUsers) Load(ctx context.Context, n int, key func(i int) string) error {
	row := make([]any, 1)
	_, err := u.Pool.CopyFrom(ctx, pgx.Identifier(strings.Split(u.Table, ".")), []string{"email"},
		pgx.CopyFromSlice(n, func(i int) ([]any, error) { row[0] = key(i); return row, nil }))
	if err != nil {
		return fmt.Errorf("demo: load: %w", err)
	}
	if _, err := u.Pool.Exec(ctx, "ANALYZE "+u.ident()); err != nil {
		return fmt.Errorf("demo: analyze: %w", err)
	}
	return nil
}

// Insert adds one user and returns its id.
func (u PostgresUsers) Insert(ctx context.Context, email string) (int64, error) {
	var id int64
	if err := u.Pool.QueryRow(ctx, "INSERT INTO "+u.ident()+" (email) VALUES ($1) RETURNING id", email).Scan(&id); err != nil {
		return 0, fmt.Errorf("demo: insert: %w", err)
	}
	return id, nil
}

// Delete removes the user with this e-mail.
func (u PostgresUsers) Delete(ctx context.Context, email string) error {
	if _, err := u.Pool.Exec(ctx, "DELETE FROM "+u.ident()+" WHERE email = $1", email); err != nil {
		return fmt.Errorf("demo: delete: %w", err)
	}
	return nil
}

// Find returns the id of the user with this e-mail, and whether there is one.
func (u PostgresUsers) Find(ctx context.Context, email string) (int64, bool, error) {
	var id int64
	err := u.Pool.QueryRow(ctx, "SELECT id FROM "+u.ident()+" WHERE email = $1", email).Scan(&id)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return 0, false, nil
	case err != nil:
		return 0, false, fmt.Errorf("demo: find: %w", err)
	}
	return id, true, nil
}

// Drop drops the table.
func (u PostgresUsers) Drop(ctx context.Context) error {
	_, err := u.Pool.Exec(ctx, "DROP TABLE IF EXISTS "+u.ident())
	return err
}

// Source returns a Source over the e-mails.
func (u PostgresUsers) Source() *postgres.Source {
	s, _ := postgres.New(postgres.Config{Pool: u.Pool, Table: u.Table, Column: "email"}) // cannot fail: both set
	return s
}
