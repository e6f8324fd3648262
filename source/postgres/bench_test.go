package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/demo"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// benchRows is BLOOMGATE_BENCH_ROWS, default 1 M.
func benchRows(b *testing.B) int {
	rows := 1_000_000
	if s := os.Getenv("BLOOMGATE_BENCH_ROWS"); s != "" {
		var err error
		if rows, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	return rows
}

// BenchmarkWarm compares a gate's warm-up from PostgreSQL with the bare
// COPY ... TO STDOUT into io.Discard on the same table, in the same run: the
// filter must not be the bottleneck. Rows: BLOOMGATE_BENCH_ROWS (default 1 M).
//
//	BLOOMGATE_BENCH_ROWS=10000000 go test ./source/postgres -run XXX -bench Warm -benchtime 3x -count 3
func BenchmarkWarm(b *testing.B) {
	rows := benchRows(b)
	pool, schema := testDB(b)
	ctx := context.Background()
	users := demo.PostgresUsers{Pool: pool, Table: schema + ".users"}
	if err := users.Create(ctx); err != nil {
		b.Fatal(err)
	}
	if err := users.Load(ctx, rows, emails("user", rows)); err != nil {
		b.Fatal(err)
	}
	query := `COPY (SELECT "email" FROM "` + schema + `"."users") TO STDOUT`
	report := func(b *testing.B) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mkeys/s")
	}
	b.Run("copy-discard", func(b *testing.B) {
		for b.Loop() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Conn().PgConn().CopyTo(ctx, io.Discard, query); err != nil {
				b.Fatal(err)
			}
			conn.Release()
		}
		report(b)
	})
	b.Run("scan-only", func(b *testing.B) {
		src := users.Source()
		for b.Loop() {
			if err := src.Scan(ctx, func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("gate-warm", func(b *testing.B) {
		for b.Loop() {
			g, err := bloomgate.New(bloomgate.Config{Source: users.Source(), FPRate: 0.001})
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Warm(ctx); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
}

// BenchmarkBootstrap times the change feed's bootstrap on a table of
// BLOOMGATE_BENCH_ROWS e-mail keys (default 1 M) in a private cluster with
// wal_level=logical: each iteration creates the slot and COPYs the table
// under its exported snapshot, in GOMAXPROCS block ranges at once (the
// default, parts=max) or in one stream (a pool of one connection, parts=1).
// feed-discard hands the keys to a function that keeps nothing, the bare
// cost of the feed; gate-follow is Gate.Follow from nothing to ready, a
// Bloom filter at 0.1 % built from the bootstrap.
//
//	BLOOMGATE_BENCH_ROWS=100000000 go test ./source/postgres -run XXX -bench Bootstrap -benchtime 2x -timeout 60m
func BenchmarkBootstrap(b *testing.B) {
	rows := benchRows(b)
	pool, schema := schemaOn(b, testsvc.LogicalPostgres(b).DSN)
	ctx := context.Background()
	table := schema + ".users"
	for _, q := range []string{
		"CREATE TABLE " + table + " (email text NOT NULL)",
		"CREATE PUBLICATION " + schema + " FOR TABLE " + table,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			b.Fatal(err)
		}
	}
	for lo := 0; lo < rows; lo += 10_000_000 { // one transaction per 10 M rows
		hi := min(rows, lo+10_000_000)
		if _, err := pool.Exec(ctx, fmt.Sprintf("INSERT INTO %s SELECT 'user' || i || '@example.com' FROM generate_series(%d, %d) i", table, lo, hi-1)); err != nil {
			b.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "VACUUM (FREEZE, ANALYZE) "+table); err != nil {
		b.Fatal(err)
	}
	feedConfig := func(parts string) postgres.FeedConfig {
		conn := pool.Config().ConnString()
		if parts == "1" {
			conn += "&pool_max_conns=1"
		}
		return postgres.FeedConfig{ConnString: conn, Table: table, Column: "email", Slot: schema, Publication: schema}
	}
	report := func(b *testing.B) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mkeys/s")
	}
	newFeed := func(b *testing.B, parts string) *postgres.Feed {
		f, err := postgres.NewFeed(feedConfig(parts))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { f.Close() })
		return f
	}
	for _, parts := range []string{"max", "1"} {
		b.Run("parts="+parts+"/feed-discard", func(b *testing.B) {
			f := newFeed(b, parts)
			for b.Loop() {
				n := 0
				if _, err := f.Bootstrap(ctx, func([]byte) error { n++; return nil }); err != nil {
					b.Fatal(err)
				}
				if n != rows {
					b.Fatalf("bootstrap delivered %d keys, the table has %d", n, rows)
				}
			}
			report(b)
		})
		b.Run("parts="+parts+"/gate-follow", func(b *testing.B) {
			f := newFeed(b, parts)
			for b.Loop() {
				g, err := bloomgate.New(bloomgate.Config{FPRate: 0.001})
				if err != nil {
					b.Fatal(err)
				}
				fctx, cancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- g.Follow(fctx, f, bloomgate.FollowConfig{Identity: table, MaxLag: time.Minute}) }()
				if err := g.WaitReady(ctx); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cancel()
				if err := <-done; !errors.Is(err, context.Canceled) {
					b.Fatalf("Follow returned %v", err)
				}
				g.Close()
				b.StartTimer()
			}
			report(b)
		})
	}
}
