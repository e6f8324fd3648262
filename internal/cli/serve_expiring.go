package cli

import (
	"context"
	"fmt"
	"strconv"

	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

// A set of kind expiring is a table-backed expiring set (serve.ExpiringSetConfig):
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
//	  rebuild-interval 1m         # rescan for rows written without BG.XADD
//	}
//
// It does not follow the change feed: "follow" is off for it.
//
// or, instead of table, column and expires-column, a query returning the key
// and its expiry.

func (s *setDecl) applyExpiring(l confLine) error {
	switch l.key {
	case "expires-column":
		s.ExpiresColumn = l.value
	case "max-ttl":
		d, err := l.duration()
		if err != nil {
			return err
		}
		s.MaxTTL = d
	case "generations":
		g, err := strconv.Atoi(l.value)
		if err != nil || g < 2 || g > 64 {
			return l.errorf("want an integer from 2 to 64")
		}
		s.Generations = g
	}
	return nil
}

// checkExpiring checks the keys that belong to kind expiring, and only to it.
// An expiring set does not follow the change feed (it rescans its table), so
// for one it turns Follow off, refusing an explicit "follow yes".
func (s *setDecl) checkExpiring() error {
	if s.Kind != "expiring" {
		if s.ExpiresColumn != "" || s.MaxTTL != 0 || s.Generations != 0 {
			return fmt.Errorf("line %s: set %q: expires-column, max-ttl and generations need kind expiring", s.Line, s.Name)
		}
		return nil
	}
	switch {
	case s.MaxTTL == 0:
		return fmt.Errorf("line %s: set %q: kind expiring needs max-ttl", s.Line, s.Name)
	case s.Capacity == 0:
		return fmt.Errorf("line %s: set %q: kind expiring needs capacity (revocations per max-ttl)", s.Line, s.Name)
	case s.Query == "" && s.ExpiresColumn == "":
		return fmt.Errorf("line %s: set %q: kind expiring needs expires-column, or a query returning the key and its expiry", s.Line, s.Name)
	case s.Confirm != "" || s.Normalize != "":
		return fmt.Errorf("line %s: set %q: kind expiring takes no confirm or normalize", s.Line, s.Name)
	case s.Follow && s.FollowGiven:
		return fmt.Errorf("line %s: set %q: kind expiring does not follow the change feed yet (it rescans the table every rebuild-interval): remove \"follow yes\"", s.Line, s.Name)
	case s.Fanout != "":
		return fmt.Errorf("line %s: set %q: kind expiring takes no fanout", s.Line, s.Name)
	}
	s.Follow = false
	return nil
}

// openExpiringSets connects the sources of the sets of kind expiring. The
// returned func closes them.
func openExpiringSets(ctx context.Context, decls []setDecl) ([]serve.ExpiringSetConfig, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	var out []serve.ExpiringSetConfig
	for _, d := range decls {
		if d.Kind != "expiring" {
			continue
		}
		sc := serve.ExpiringSetConfig{
			Name: d.Name,
			Params: serve.ExpiringParams{MaxTTL: d.MaxTTL, Capacity: d.Capacity, ErrorRate: d.FPRate,
				Generations: d.Generations},
			RefreshInterval: d.RebuildInterval,
		}
		switch {
		case d.Postgres != "":
			timeout := orDefault(d.ConnectTimeout, defaultConnectTimeout)
			cctx, cancel := context.WithTimeout(ctx, timeout)
			pool, err := postgres.Connect(cctx, d.Postgres)
			cancel()
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: postgres: %w", d.Name, timeoutHint(err, cctx, timeout))
			}
			closers = append(closers, pool.Close)
			sc.Source = postgres.Expiring{Pool: pool, Table: d.Table, KeyColumn: d.Column, ExpiresColumn: d.ExpiresColumn, Query: d.Query}
		default:
			db, err := sqlite.Open(d.SQLite)
			if err != nil {
				return nil, closeAll, fmt.Errorf("set %q: %w", d.Name, err)
			}
			closers = append(closers, func() { db.Close() })
			sc.Source = sqlite.Expiring{DB: db, Table: d.Table, KeyColumn: d.Column, ExpiresColumn: d.ExpiresColumn, Query: d.Query}
		}
		out = append(out, sc)
	}
	return out, closeAll, nil
}
