package redisstream

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Dial returns a client for a Redis URL (redis://[user:password@]host:port/db,
// rediss:// for TLS) and checks that the server answers PING within
// timeout (default 5 s): an unreachable or silent server, or a refused
// password, is an error within that time, never a wait. Dial and read
// timeouts of later commands are timeout as well; a blocking read the
// adapter makes adds its own block time.
func Dial(ctx context.Context, url string, timeout time.Duration) (redis.UniversalClient, error) {
	defaults.Set(&timeout, 5*time.Second)
	opts, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("redisstream: %w", err)
	}
	opts.DialTimeout, opts.ReadTimeout, opts.WriteTimeout = timeout, timeout, timeout
	// One dial per attempt: a refused connection is reported as such, not
	// as a deadline after the pool's own retries.
	opts.DialerRetries = 1
	c := redis.NewClient(opts)
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := c.Ping(pctx).Err(); err != nil {
		c.Close()
		return nil, fmt.Errorf("redisstream: %s: %w", opts.Addr, err)
	}
	return c, nil
}
