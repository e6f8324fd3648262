package pgwire

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestTableRedefined: once the set's table is swapped for another of its
// name (renamed, a new one renamed in its place), a key of the new table
// is found through the front end, as straight to PostgreSQL, though the
// set never saw it: the insert position read, as bloomgate serve reads it,
// also checks the table's definition, and the statement is relayed
// (reason table_changed) from then on.
func TestTableRedefined(t *testing.T) {
	f := newFrontEnd(t, func(c *Config) {
		st := &c.Statements[0]
		r, err := postgres.NewPositionReader(context.Background(), testsvc.Postgres(t), DefaultPositionTimeout)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		if err := r.Watch(context.Background(), "public."+st.Table, st.Column); err != nil {
			t.Fatal(err)
		}
		st.ReadPosition = r.Read
	})
	ctx := context.Background()
	c := connectMode(t, f.front, pgx.QueryExecModeCacheStatement)
	q, lookup := f.absentLookup(t, c)
	lookup("swapped-key") // learns the shape
	lookup("swapped-key") // answered locally
	if got := f.count(t, "bloomgate_pgwire_answered_total"); got != 1 {
		t.Fatalf("answered %v, want 1", got)
	}
	admin := f.direct(t)
	for _, sql := range []string{
		"CREATE TABLE " + f.table + "_new (LIKE " + f.table + " INCLUDING ALL)",
		"INSERT INTO " + f.table + "_new VALUES ('swapped-key', 7)",
		"ALTER TABLE " + f.table + " RENAME TO " + f.table + "_old",
		"ALTER TABLE " + f.table + "_new RENAME TO " + f.table,
	} {
		if _, err := admin.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+f.table+"_old") })
	for range 2 {
		var n int
		if err := c.QueryRow(ctx, q, "swapped-key").Scan(new(string), &n); err != nil || n != 7 {
			t.Fatalf("the new table's key through the front end: %v (n %d), want its row", err, n)
		}
	}
	if got := f.count(t, "bloomgate_pgwire_forwarded_total", "reason", ReasonTableChanged); got != 2 {
		t.Errorf("forwarded for %s: %v, want 2", ReasonTableChanged, got)
	}
}
