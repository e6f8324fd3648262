package postgres_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestExpiringScan reads a revocations table: rows whose expiry is ahead,
// with their expiry; expired rows and NULLs left out; a bad query refused.
func TestExpiringScan(t *testing.T) {
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
