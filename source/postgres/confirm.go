package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Confirm runs an exact existence query for one key, such as
// "SELECT 1 FROM users WHERE email = $1": the key is its only parameter, and
// the key exists when the query returns a row. It is safe for concurrent use.
type Confirm struct {
	Pool  *pgxpool.Pool
	Query string
}

// Exists reports whether the query returns a row for key.
func (c Confirm) Exists(ctx context.Context, key string) (bool, error) {
	var one any
	err := c.Pool.QueryRow(ctx, c.Query, key).Scan(&one)
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}
