package server

import (
	"context"
	"log/slog"

	"github.com/bloomgate/bloomgate/serve"
)

// A set of filter.FamilyWindowed is a table-backed expiring set
// (serve.ExpiringSetConfig). In the config file:
//
//	set revoked {
//	  postgres postgres://app@127.0.0.1:5432/app
//	  kind expiring
//	  table revocations
//	  column jti
//	  expires-column expires_at   # timestamptz (PostgreSQL); Unix seconds or text (SQLite)
//	  max-ttl 24h                 # required: the furthest expiry ahead
//	  capacity 1000000            # revocations per max TTL
//	  fp-rate 0.001
//	  generations 8
//	  max-lag 30s                 # the change feed's staleness bound
//	}
//
// With a source that has a change feed (PostgreSQL) it follows it, expiry
// column included (serve.ExpiringFeed; slot, publication and max-lag as for
// other followed sets). With "follow no" (required for sqlite) it rescans
// the table every rebuild-interval instead, and may take, instead of
// table, column and expires-column, a query returning the key and its
// expiry.

// expiringSetConfig returns the serve config of an expiring set whose
// source is src, opening its change feed when it follows one. The returned
// closers release the feed (dropping its slot).
func expiringSetConfig(ctx context.Context, s *SetConfig, src *openedSource, log *slog.Logger) (serve.ExpiringSetConfig, []func(), error) {
	sc := serve.ExpiringSetConfig{
		Name: s.Name,
		Params: serve.ExpiringParams{MaxTTL: s.Expiring.MaxTTL, Capacity: s.Capacity, ErrorRate: s.FPRate,
			Generations: s.Expiring.Generations},
		RefreshInterval: s.RebuildInterval,
		Source:          src.expiring,
	}
	if !s.follows() || src.expiringFeed == nil {
		return sc, nil, nil
	}
	feed, closeFeed, err := src.expiringFeed(ctx)
	if err != nil {
		return sc, []func(){closeFeed}, err
	}
	sc.Feed, sc.MaxLag = feed, s.Feed.MaxLag
	return sc, []func(){closeFeed}, nil
}
