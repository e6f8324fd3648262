package pgwire

import (
	"context"
	"fmt"
	"net"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestSearchPathChangedOutOfSight: a session that points its search_path at
// another schema holding a table of the set's table's name, in a form other
// than a bare SET search_path (a quoted name, a quoted set_config, set_config
// inside a DO block's body), finds that table's rows through the front end as
// straight to PostgreSQL: never a "no row" answered from the set.
func TestSearchPathChangedOutOfSight(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	admin := f.direct(t)
	shadow := "shadow_" + f.table
	for _, q := range []string{"CREATE SCHEMA " + shadow, "CREATE TABLE " + shadow + "." + f.table + " (email text, n int)",
		"INSERT INTO " + shadow + "." + f.table + " VALUES ('shadow-key', 1)"} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA "+shadow+" CASCADE") })
	for _, change := range []string{
		`SET "search_path" = ` + shadow + `, public`,
		`SET "SEARCH_PATH" = ` + shadow + `, public`,
		`SELECT "set_config"('search_path', '` + shadow + `, public', false)`,
		`DO $$BEGIN PERFORM set_config('search_path', '` + shadow + `, public', false); END$$`,
		`DO 'BEGIN PERFORM set_config(''search_path'', ''` + shadow + `, public'', false); END'`,
	} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			c := connectMode(t, f.front, mode)
			_, lookup := f.absentLookup(t, c)
			lookup("absent-1") // learns the shape
			lookup("absent-2") // answered locally
			if _, err := c.Exec(ctx, change); err != nil {
				t.Fatalf("%s: %v", change, err)
			}
			var n int
			err := c.QueryRow(ctx, "SELECT email, n FROM "+f.table+" WHERE email = $1", "shadow-key").Scan(new(string), &n)
			if err != nil || n != 1 {
				t.Errorf("%v, after %s: %v, want the shadow table's row", mode, change, err)
			}
			c.Close(ctx)
		}
	}
}

// TestTempTableShadows: a session that creates a temporary table of the set's
// table's name (which its search_path puts first) finds that table's rows
// through the front end as straight to PostgreSQL.
func TestTempTableShadows(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	for _, create := range []string{
		"CREATE TEMP TABLE " + f.table + " (email text, n int)",
		"CREATE TEMPORARY TABLE " + f.table + " (email text, n int)",
		"CREATE TABLE pg_temp." + f.table + " (email text, n int)",
		"SELECT 'temp-key'::text AS email, 1 AS n INTO TEMP " + f.table,
	} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			c := connectMode(t, f.front, mode)
			_, lookup := f.absentLookup(t, c)
			lookup("absent-1") // learns the shape
			lookup("absent-2") // answered locally
			if _, err := c.Exec(ctx, create); err != nil {
				t.Fatalf("%s: %v", create, err)
			}
			if _, err := c.Exec(ctx, "INSERT INTO "+f.table+" SELECT 'temp-key', 1 WHERE NOT EXISTS (SELECT 1 FROM "+f.table+")"); err != nil {
				t.Fatal(err)
			}
			q := "SELECT email, n FROM " + f.table + " WHERE email = $1"
			lookup("absent-3") // learns the shape again (DDL passed)
			for range 2 {
				var n int
				if err := c.QueryRow(ctx, q, "temp-key").Scan(new(string), &n); err != nil || n != 1 {
					t.Errorf("%v, after %s: %v, want the temporary table's row", mode, create, err)
				}
			}
			c.Close(ctx)
		}
	}
}

// TestUserSchemaShadows: a role with a schema of its own name holding a
// table of the set's table's name (the default search_path "$user", public
// puts it first) finds that table's rows through the front end as straight
// to PostgreSQL, while the answer statement names the set's table with its
// schema and is still answered locally for absent keys.
func TestUserSchemaShadows(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	admin := f.direct(t)
	role := "app_" + f.table
	for _, q := range []string{
		"CREATE ROLE " + role + " LOGIN PASSWORD 'app'",
		"GRANT SELECT ON public." + f.table + " TO " + role,
		"CREATE SCHEMA " + role + " AUTHORIZATION " + role,
		"CREATE TABLE " + role + "." + f.table + " (email text, n int)",
		"INSERT INTO " + role + "." + f.table + " VALUES ('only@x.com', 1)",
		"GRANT SELECT ON " + role + "." + f.table + " TO " + role,
	} {
		if _, err := admin.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		admin, err := pgx.Connect(context.Background(), f.dsn)
		if err != nil {
			return
		}
		defer admin.Close(context.Background())
		admin.Exec(context.Background(), "DROP SCHEMA "+role+" CASCADE")
		admin.Exec(context.Background(), "DROP OWNED BY "+role)
		admin.Exec(context.Background(), "DROP ROLE "+role)
	})
	cfg, err := pgx.ParseConfig(f.front)
	if err != nil {
		t.Fatal(err)
	}
	front := fmt.Sprintf("postgres://%s:app@%s/%s?sslmode=disable", role, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), cfg.Database)
	unqualified := "SELECT email, n FROM " + f.table + " WHERE email = $1"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		c := connectMode(t, front, mode)
		for i := range 3 { // the first learns the shape, were it answered
			var n int
			if err := c.QueryRow(ctx, unqualified, "only@x.com").Scan(new(string), &n); err != nil || n != 1 {
				t.Fatalf("%v, lookup %d: %v, want the row of %s.%s", mode, i+1, err, role, f.table)
			}
		}
		_, lookup := f.absentLookup(t, c)
		lookup("absent-1") // learns the shape
		before := f.count(t, "bloomgate_pgwire_answered_total")
		lookup("absent-2") // answered locally
		if got := f.count(t, "bloomgate_pgwire_answered_total") - before; got != 1 {
			t.Errorf("%v: %v absent keys answered locally, want 1 (the schema-qualified answer statement)", mode, got)
		}
		c.Close(ctx)
	}
}
