package postgres

import (
	"context"
	"errors"
	"fmt"

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

// Check prepares the query on the database without running it: a query
// that cannot run (a syntax error, a missing table or column, a missing
// grant) or that does not take the key as its only parameter is an error
// at start rather than at the first lookup that reaches it.
func (c Confirm) Check(ctx context.Context) error {
	conn, err := c.Pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	sd, err := conn.Conn().Prepare(ctx, "", c.Query)
	if err != nil {
		return fmt.Errorf("confirm query %q: %w", c.Query, err)
	}
	if len(sd.ParamOIDs) != 1 {
		return fmt.Errorf("confirm query %q takes %d parameters: want the key as $1, its only one", c.Query, len(sd.ParamOIDs))
	}
	return nil
}
