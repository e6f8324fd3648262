package postgres_test

import (
	"context"
	"errors"
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
		return postgres.ParseLSN(s)
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

func TestLSN(t *testing.T) {
	for s, want := range map[string]changefeed.Position{"0/0": 0, "16/B374D848": 0x16_B374D848, "FFFFFFFF/FFFFFFFF": ^changefeed.Position(0), "0/1878708": 0x1878708} {
		p, err := postgres.ParseLSN(s)
		if err != nil || p != want || postgres.FormatLSN(p) != s || postgres.LSN.Format(p) != s {
			t.Errorf("%q: %v (%s), %v; want %v", s, p, postgres.FormatLSN(p), err, uint64(want))
		}
		if q, err := postgres.LSN.Parse(s); err != nil || q != want {
			t.Errorf("LSN.Parse(%q) = %v, %v", s, q, err)
		}
	}
	if p, err := postgres.ParseLSN("16/b374d848"); err != nil || p != 0x16_B374D848 {
		t.Errorf("lower case: %v, %v", p, err)
	}
	for _, s := range []string{"", "1", "1/", "/1", "x/1", "1/100000000", "-1/1", "1/1/1", "+1/1"} {
		if _, err := postgres.ParseLSN(s); !errors.Is(err, changefeed.ErrBadPosition) {
			t.Errorf("%q: %v, want ErrBadPosition", s, err)
		}
	}
}

func FuzzParseLSN(f *testing.F) {
	f.Add("16/B374D848")
	f.Add("0/0")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := postgres.ParseLSN(s)
		if err != nil {
			return
		}
		q, err := postgres.ParseLSN(postgres.FormatLSN(p))
		if err != nil || q != p {
			t.Fatalf("%q → %v → %q → %v, %v", s, uint64(p), postgres.FormatLSN(p), uint64(q), err)
		}
	})
}
