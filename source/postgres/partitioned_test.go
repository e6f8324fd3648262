package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestSetupPartitionedTable: for a partitioned table, setup publishes its
// changes through the root (publish_via_partition_root), so that the feed,
// which follows the root's name, finds its table in the publication; run
// once, setup then has nothing left to do, and the feed bootstraps — where
// it advised ALTER PUBLICATION … ADD TABLE for a table already published,
// again and again.
func TestSetupPartitionedTable(t *testing.T) {
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE parts (email text NOT NULL, note text) PARTITION BY RANGE (email)",
		"CREATE TABLE parts_a PARTITION OF parts FOR VALUES FROM (MINVALUE) TO ('m')",
		"CREATE TABLE parts_b PARTITION OF parts FOR VALUES FROM ('m') TO (MAXVALUE)",
		"INSERT INTO parts VALUES ('a@example.com'), ('z@example.com')")
	ctx := context.Background()
	for _, existing := range []bool{false, true} {
		if existing { // a publication made by hand, without the option
			pg.SQL(t, "DROP PUBLICATION IF EXISTS bloomgate_public_parts_email",
				"CREATE PUBLICATION bloomgate_public_parts_email FOR TABLE parts")
		}
		f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: pg.DSN, Table: "public.parts", Column: "email"})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		plan, err := f.Setup(ctx, postgres.SetupOptions{Identity: postgres.IdentityFull})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(strings.Join(plan.Statements, "\n"), "publish_via_partition_root = true") {
			t.Errorf("existing publication %v: the plan does not publish through the root:\n%s", existing, strings.Join(plan.Statements, "\n"))
		}
		if err := f.ApplySetup(ctx, plan); err != nil {
			t.Fatal(err)
		}
		again, err := f.Setup(ctx, postgres.SetupOptions{Identity: postgres.IdentityFull})
		if err != nil {
			t.Fatal(err)
		}
		if len(again.Statements) != 0 {
			t.Errorf("existing publication %v: setup run twice still plans:\n%s", existing, strings.Join(again.Statements, "\n"))
		}
		keys := 0
		if _, err := f.Bootstrap(ctx, func([]byte) error { keys++; return nil }); err != nil {
			t.Fatalf("existing publication %v: bootstrap after setup: %v", existing, err)
		}
		if keys != 2 {
			t.Errorf("bootstrap read %d keys, want 2", keys)
		}
		f.DropSlot(ctx)
	}
}
