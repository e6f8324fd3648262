// Package fanouttest holds what the fan-out adapters' tests share: a
// PostgreSQL table with a publication in a fresh database of the test
// binary's private cluster with wal_level=logical (testsvc.LogicalPostgres),
// dropped with its slots afterwards.
package fanouttest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// PG is a table with a publication in its own schema and database; the
// database, slots and all, is dropped when the test ends.
type PG struct {
	// URL is the connection string of the database.
	URL           string
	Schema, Table string
	// Insert commits one row and returns the WAL position after the commit:
	// the writer's read-your-writes token.
	Insert func(ctx context.Context, key string) (changefeed.Position, error)
	// InsertMany commits n rows prefix0@x … prefix<n-1>@x in one
	// transaction and returns the WAL position after the commit.
	InsertMany func(ctx context.Context, prefix string, n int) (changefeed.Position, error)
	// Source scans the table (a gate's Config.Source).
	Source bloomgate.Source
}

// Feed returns a change feed of the table through the fixture's slot.
func (fx *PG) Feed(t testing.TB) *postgres.Feed {
	t.Helper()
	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: fx.URL, Table: fx.Table, Column: "email",
		Slot: fx.Schema, Publication: fx.Schema, StatusInterval: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// NewPG creates the table with preRows rows. Without the PostgreSQL server
// binaries the test skips, or fails under BLOOMGATE_REQUIRE_SERVICES=1. The
// test package's TestMain must call testsvc.Main.
func NewPG(t testing.TB, preRows int) *PG {
	t.Helper()
	url := testsvc.LogicalPostgres(t).DSN
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	crand.Read(b[:])
	schema := "bg_fanout_" + hex.EncodeToString(b[:])
	fx := &PG{URL: url, Schema: schema, Table: schema + ".users"}
	t.Cleanup(pool.Close)
	for _, q := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE TABLE " + fx.Table + " (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE)",
		"CREATE PUBLICATION " + schema + " FOR TABLE " + fx.Table,
		fmt.Sprintf("INSERT INTO %s (email) SELECT 'pre' || g || '@x' FROM generate_series(1, %d) g", fx.Table, preRows),
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	fx.Insert = func(ctx context.Context, key string) (changefeed.Position, error) {
		if _, err := pool.Exec(ctx, "INSERT INTO "+fx.Table+" (email) VALUES ($1)", key); err != nil {
			return 0, err
		}
		var lsn string
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return 0, err
		}
		return postgres.ParseLSN(lsn)
	}
	fx.InsertMany = func(ctx context.Context, prefix string, n int) (changefeed.Position, error) {
		if _, err := pool.Exec(ctx, "INSERT INTO "+fx.Table+" (email) SELECT $1 || g || '@x' FROM generate_series(0, $2::int - 1) g", prefix, n); err != nil {
			return 0, err
		}
		var lsn string
		if err := pool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return 0, err
		}
		return postgres.ParseLSN(lsn)
	}
	src, err := postgres.New(postgres.Config{Pool: pool, Table: fx.Table, Column: "email"})
	if err != nil {
		t.Fatal(err)
	}
	fx.Source = src
	return fx
}
