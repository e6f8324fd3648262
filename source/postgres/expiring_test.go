package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestExpiringScan reads a revocations table: rows whose expiry is ahead,
// with their expiry; expired rows and NULLs left out; a bad query refused.
func TestExpiringScan(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	table := schema + ".revocations"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+` (jti text, expires_at timestamptz);
		INSERT INTO `+table+` VALUES ('a', now() + interval '1 hour'), ('b', now() + interval '2 hours'),
		('gone', now() - interval '1 minute'), (NULL, now() + interval '1 hour'), ('no-exp', NULL)`); err != nil {
		t.Fatal(err)
	}
	scan := func(e postgres.Expiring) (map[string]time.Time, error) {
		out := map[string]time.Time{}
		err := e.ScanExpiring(ctx, func(k []byte, exp time.Time) error {
			out[string(k)] = exp
			return nil
		})
		return out, err
	}
	got, err := scan(postgres.Expiring{Pool: pool, Table: table, KeyColumn: "jti", ExpiresColumn: "expires_at"})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 0, len(got))
	for k := range got {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	if !slices.Equal(keys, []string{"a", "b"}) {
		t.Errorf("keys = %v, want [a b]", keys)
	}
	if d := time.Until(got["b"]); d < 119*time.Minute || d > 121*time.Minute {
		t.Errorf("b expires in %v, want about 2 h", d)
	}
	// A Unix-seconds column through a query.
	got, err = scan(postgres.Expiring{Pool: pool, Query: "SELECT 'x', to_timestamp(4102444800)"})
	if err != nil || !got["x"].Equal(time.Unix(4102444800, 0)) {
		t.Errorf("query with to_timestamp: %v, %v", got, err)
	}
	if _, err := scan(postgres.Expiring{Pool: pool, Query: "SELECT 'x'"}); !errors.Is(err, postgres.ErrBadExpiringQuery) {
		t.Errorf("one-column query: %v", err)
	}
	if _, err := scan(postgres.Expiring{Pool: pool, Query: "SELECT 'x', 'not a time'::text"}); !errors.Is(err, postgres.ErrBadExpiringQuery) {
		t.Errorf("text expiry: %v", err)
	}
	if _, err := scan(postgres.Expiring{Pool: pool}); err == nil {
		t.Error("no table and no query accepted")
	}
}

func TestParseTimestamptz(t *testing.T) {
	for in, want := range map[string]time.Time{
		"2026-12-01 13:00:00+00":           time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC),
		"2026-12-01 13:00:00.25+00":        time.Date(2026, 12, 1, 13, 0, 0, 250e6, time.UTC),
		"2026-12-01 18:30:00.000001+05:30": time.Date(2026, 12, 1, 13, 0, 0, 1000, time.UTC),
		"2026-12-01 09:59:43-03:00:17":     time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC),
		"2026-12-01 13:00:00":              time.Date(2026, 12, 1, 13, 0, 0, 0, time.UTC),
	} {
		got, err := postgres.ParseTimestamptz([]byte(in))
		if err != nil || !got.Equal(want) {
			t.Errorf("%q: %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-infinity", "0044-03-15 12:00:00+00 BC", "12/01/2026 13:00:00 UTC", "soon"} {
		if _, err := postgres.ParseTimestamptz([]byte(in)); !errors.Is(err, postgres.ErrBadTimestamp) {
			t.Errorf("%q: %v, want ErrBadTimestamp", in, err)
		}
	}
	if got, err := postgres.ParseTimestamptz([]byte("infinity")); err != nil || got.Year() != 9999 {
		t.Errorf("infinity: %v, %v", got, err)
	}
}

// TestExpiringFeed follows a revocations table with its expiry as the value
// column: the bootstrap's scan (under the slot's snapshot) and the stream
// together hold every row, one committed before the slot, one in a
// transaction open across the slot's creation, and ones written after;
// every expiry arrives exactly, whatever the server's TimeZone.
func TestExpiringFeed(t *testing.T) {
	t.Parallel() // a cluster of its own: its open transaction holds up no other test's slot creation
	pg := testsvc.NewPostgres(t, testsvc.PGOptions{})
	ctx := context.Background()
	pool, schema := schemaOn(t, pg.DSN)
	table := schema + ".revocations"
	for _, q := range []string{
		"CREATE TABLE " + table + " (jti text PRIMARY KEY, expires_at timestamptz)",
		"CREATE PUBLICATION " + schema + " FOR TABLE " + table,
		"ALTER DATABASE " + pg.Database + " SET timezone = 'Asia/Kolkata'",
		"INSERT INTO " + table + " VALUES ('before', '2030-01-01 00:00:00.5+00')",
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, "INSERT INTO "+table+" VALUES ('open', '2030-01-02 00:00:00+00')"); err != nil {
		t.Fatal(err)
	}
	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: pg.DSN, Table: table, Column: "jti", ValueColumn: "expires_at",
		Slot: schema, Publication: schema, StatusInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	seen := map[string]time.Time{}
	type result struct {
		p   changefeed.Position
		err error
	}
	done := make(chan result, 1)
	go func() {
		p, err := f.BootstrapTx(ctx, func(ctx context.Context, tx pgx.Tx) error {
			return postgres.Expiring{Table: table, KeyColumn: "jti", ExpiresColumn: "expires_at"}.ScanExpiringTx(ctx, tx,
				func(k []byte, exp time.Time) error {
					seen[string(k)] = exp
					return nil
				})
		})
		done <- result{p, err}
	}()
	// The slot waits for the open transaction; commit it once the slot is
	// being created.
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var n int
		pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", schema).Scan(&n)
		return n == 1
	}, "slot %s never appeared", schema)
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	r := <-done
	if r.err != nil {
		t.Fatal(r.err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" VALUES ('after', '2030-01-03 00:00:00+00'); "+
		"UPDATE "+table+" SET expires_at = '2030-01-04 00:00:00+00' WHERE jti = 'before'; "+
		"COPY "+table+" FROM PROGRAM 'echo copied,2030-01-05 00:00:00+00' (FORMAT csv); "+
		"INSERT INTO "+table+" VALUES ('null', NULL)"); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var streamed []string
	var nullValue bool
	err = f.Stream(sctx, r.p, func(tx changefeed.Txn) error {
		for _, c := range tx.Changes {
			if c.Kind != changefeed.Insert {
				continue
			}
			if c.Value == nil {
				nullValue = string(c.Key) == "null"
				cancel()
				continue
			}
			exp, err := postgres.ParseTimestamptz(c.Value)
			if err != nil {
				return err
			}
			streamed = append(streamed, string(c.Key)+" "+exp.UTC().Format(time.RFC3339Nano))
			seen[string(c.Key)] = exp // the latest change wins
		}
		return nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	t.Logf("streamed: %q", streamed)
	want := map[string]string{"before": "2030-01-04T00:00:00Z", "open": "2030-01-02T00:00:00Z",
		"after": "2030-01-03T00:00:00Z", "copied": "2030-01-05T00:00:00Z"}
	for k, w := range want {
		if got := seen[k].UTC().Format(time.RFC3339Nano); got != w {
			t.Errorf("%s: expiry %s, want %s", k, got, w)
		}
	}
	if !nullValue {
		t.Error("a NULL expiry did not arrive as a nil Value")
	}
}
