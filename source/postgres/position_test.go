package postgres_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestWritePositionReadYourWrites: a writer on a connection with
// synchronous_commit = off takes WritePosition after each commit, and a
// following gate's MayContainAt with that token never answers "absent" for
// the row just committed, in 10,000 writes. The same run with the written
// position (pg_current_wal_lsn(), which the docs once gave) is logged for
// comparison: it can be below the commit.
func TestWritePositionReadYourWrites(t *testing.T) {
	testsvc.Short(t, "starts a PostgreSQL cluster and follows 10,000 writes")
	fx := newFeedFixture(t, "DEFAULT")
	ctx := context.Background()
	feed := fx.feed(t)
	g, stop := followGate(t, fx, feed, bloomgate.FollowConfig{Identity: fx.table, MaxLag: 10 * time.Second})
	defer stop()
	conn, err := fx.pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "SET synchronous_commit = off"); err != nil {
		t.Fatal(err)
	}
	written := func(ctx context.Context) (changefeed.Position, error) {
		var s string
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
			return 0, err
		}
		return changefeed.ParsePosition(s)
	}
	for _, c := range []struct {
		name  string
		n     int
		token func(context.Context) (changefeed.Position, error)
	}{
		{"WritePosition", 10000, func(ctx context.Context) (changefeed.Position, error) { return postgres.WritePosition(ctx, conn) }},
		{"pg_current_wal_lsn", 3000, written},
	} {
		absent := 0
		for i := range c.n {
			key := fmt.Sprintf("%s-%d@example.com", c.name, i)
			if _, err := conn.Exec(ctx, "INSERT INTO "+fx.table+" (email) VALUES ($1)", key); err != nil {
				t.Fatal(err)
			}
			pos, err := c.token(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if !g.MayContainAt([]byte(key), pos) {
				absent++
			}
		}
		t.Logf("synchronous_commit = off, token %s: %d of %d lookups right after the commit answered absent", c.name, absent, c.n)
		if c.name == "WritePosition" && absent > 0 {
			t.Errorf("MayContainAt with WritePosition's token: %d of %d rows just committed answered absent", absent, c.n)
		}
	}
}
