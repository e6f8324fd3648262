// Package fanouttest holds what the fan-out adapters' tests share: a
// PostgreSQL table with a publication, dropped with its slots afterwards.
package fanouttest

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// PG is a table with a publication in its own schema on the test
// PostgreSQL; the schema, publication and every slot named after it are
// dropped when the test ends.
type PG struct {
	Schema, Table string
	// Insert commits one row and returns the WAL position after the commit:
	// the writer's read-your-writes token.
	Insert func(ctx context.Context, key string) (changefeed.Position, error)
	// Source scans the table (a gate's Config.Source).
	Source bloomgate.Source
}

// Feed returns a change feed of the table through the fixture's slot.
func (fx *PG) Feed(t testing.TB) *postgres.Feed {
	t.Helper()
	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: URL(), Table: fx.Table, Column: "email",
		Slot: fx.Schema, Publication: fx.Schema, StatusInterval: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// URL is the test PostgreSQL: BLOOMGATE_POSTGRES_URL, or the local default.
func URL() string {
	if u := os.Getenv("BLOOMGATE_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// NewPG creates the table with preRows rows. It skips the test when
// PostgreSQL is unreachable, unless BLOOMGATE_REQUIRE_SERVICES is set.
func NewPG(t testing.TB, preRows int) *PG {
	t.Helper()
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, URL())
	if err != nil {
		if os.Getenv("BLOOMGATE_REQUIRE_SERVICES") != "" {
			t.Fatalf("PostgreSQL unreachable and BLOOMGATE_REQUIRE_SERVICES is set: %v", err)
		}
		t.Skipf("PostgreSQL unreachable, skipping: %v", err)
	}
	var b [6]byte
	crand.Read(b[:])
	schema := "bg_fanout_" + hex.EncodeToString(b[:])
	fx := &PG{Schema: schema, Table: schema + ".users"}
	t.Cleanup(func() {
		ctx := context.Background()
		for range 100 {
			var left int
			pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%' AND active_pid IS NOT NULL", schema)
			pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%' AND NOT active", schema)
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'", schema).Scan(&left); err == nil && left == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+schema)
		pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	})
	var level string
	if err := pool.QueryRow(ctx, "SHOW wal_level").Scan(&level); err != nil {
		t.Fatal(err)
	}
	if level != "logical" {
		t.Fatalf("wal_level is %q; the change feed needs logical (.ci/run sets it)", level)
	}
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
		return changefeed.ParsePosition(lsn)
	}
	src, err := postgres.New(postgres.Config{Pool: pool, Table: fx.Table, Column: "email"})
	if err != nil {
		t.Fatal(err)
	}
	fx.Source = src
	return fx
}
