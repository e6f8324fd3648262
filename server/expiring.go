package server

import (
	"context"

	"github.com/bloomgate/bloomgate/serve"
)

// A set of filter.FamilyWindowed is a table-backed expiring set
// (serve.SetConfig with Expiring). In the config file:
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

// expiringConfig is the serve config of the expiring set s, with src and
// feed as its source and feed (feed nil: it rescans).
func expiringConfig(s *SetConfig, src serve.ExpiringSource, feed serve.ExpiringFeed) *serve.ExpiringConfig {
	ec := &serve.ExpiringConfig{
		Params: serve.ExpiringParams{MaxTTL: s.Expiring.MaxTTL, Capacity: s.Capacity, ErrorRate: s.FPRate,
			Generations: s.Expiring.Generations},
		RefreshInterval: s.RebuildInterval,
		Source:          src,
	}
	if feed != nil {
		ec.Feed, ec.MaxLag = feed, s.Feed.MaxLag
	}
	return ec
}

// openExpiringFeed opens the change feed of an expiring set whose source is
// src, when it follows one (else nil). The returned closers release the
// feed (dropping its slot).
func openExpiringFeed(ctx context.Context, s *SetConfig, src *openedSource) (serve.ExpiringFeed, []func(), error) {
	if !s.follows() || src.expiringFeed == nil {
		return nil, nil, nil
	}
	feed, closeFeed, err := src.expiringFeed(ctx)
	if err != nil {
		return nil, []func(){closeFeed}, err
	}
	return feed, []func(){closeFeed}, nil
}
