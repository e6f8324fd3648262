package jetstream_test

import (
	"context"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/bloomgate/bloomgate/internal/backoff"
)

// connect connects to the cluster, reconnecting forever.
func connect(ctx context.Context, urls string) (*nats.Conn, error) {
	for {
		nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err == nil {
			return nc, nil
		}
		if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return nil, err
		}
	}
}
