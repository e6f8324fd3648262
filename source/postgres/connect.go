package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
)

// Connect opens a pool for a connection string (URL or key=value) and checks
// it with a ping. Each connection attempt is bounded by the string's
// connect_timeout, else by DefaultTimeout, and so is the ping: a server that
// accepts and never answers gives an error wrapping changefeed.ErrTimeout
// instead of a hang until ctx's deadline.
func Connect(ctx context.Context, connString string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	timeout := cfg.ConnConfig.ConnectTimeout
	if timeout == 0 {
		timeout = DefaultTimeout
		cfg.ConnConfig.ConnectTimeout = timeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pctx); err != nil {
		pool.Close()
		if ctx.Err() == nil && pctx.Err() != nil {
			return nil, fmt.Errorf("postgres: connect: %w (%v): %v", changefeed.ErrTimeout, timeout, err)
		}
		return nil, fmt.Errorf("postgres: connect: %w", err)
	}
	return pool, nil
}
