package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
)

// Confirm runs an exact existence query for one key, such as
// "SELECT 1 FROM users WHERE email = ?": the key is its only parameter, and
// the key exists when the query returns a row. It is safe for concurrent use.
type Confirm struct {
	DB    *sql.DB
	Query string
}

// Exists reports whether the query returns a row for key.
func (c Confirm) Exists(ctx context.Context, key string) (bool, error) {
	var one any
	err := c.DB.QueryRowContext(ctx, c.Query, key).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	return err == nil, err
}

// Check prepares the query without running it: a query that cannot run (a
// syntax error, a missing table or column) is an error at start rather
// than at the first lookup that reaches it.
func (c Confirm) Check(ctx context.Context) error {
	st, err := c.DB.PrepareContext(ctx, c.Query)
	if err != nil {
		return fmt.Errorf("confirm query %q: %w", c.Query, err)
	}
	return st.Close()
}
