package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/redisstream"
)

func init() {
	registerTransport(TransportRedis, transportDriver{
		name: "redis",
		keys: map[string]func(*FanoutConfig, string) error{
			"redis": func(f *FanoutConfig, v string) error { f.Redis.URL = v; return nil },
		},
		check: func(f *FanoutConfig) error {
			if f.Redis.URL == "" {
				return errors.New("fanout redis: give redis (a redis:// URL)")
			}
			return nil
		},
		open: openRedisStream,
	})
}

// openRedisStream connects to Redis and opens the set's stream.
func openRedisStream(ctx context.Context, s *SetConfig, key []byte, log *slog.Logger) (fanout.Backend, []func(), error) {
	timeout := s.connectTimeout()
	client, err := redisstream.Dial(ctx, s.Fanout.Redis.URL, timeout)
	if err != nil {
		return fanout.Backend{}, nil, fmt.Errorf("set %q: redis: %w", s.Name, timeoutHint(err, ctx, timeout))
	}
	closers := []func(){func() { client.Close() }}
	set, err := redisstream.Open(ctx, redisstream.Config{Client: client, Set: s.Name, LeaseTTL: s.Fanout.LeaseTTL,
		WaitReplicas: s.Fanout.Replicas, Key: key, Logger: log})
	if err != nil {
		return fanout.Backend{}, closers, fmt.Errorf("set %q: redis: %w", s.Name, timeoutHint(err, ctx, timeout))
	}
	return set.Backend(), closers, nil
}
