package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestCheckAnswer: every parameter must be text or varchar (any valid text
// is then a valid value), the key column text with a deterministic
// collation; the parameters' types are returned.
func TestCheckAnswer(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	table := schema + ".users"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (email text, tenant varchar(20), n int)"); err != nil {
		t.Fatal(err)
	}
	_, oids, err := postgres.CheckAnswer(ctx, pool, table, table, "email", "SELECT n FROM "+table+" WHERE tenant = $1 AND email = $2")
	if err != nil || len(oids) != 2 || oids[0] != 25 || oids[1] != 25 {
		t.Fatalf("two text parameters: %v %v", oids, err)
	}
	_, _, err = postgres.CheckAnswer(ctx, pool, table, table, "email", "SELECT n FROM "+table+" WHERE email = $1 AND n = $2")
	if err == nil || !strings.Contains(err.Error(), "the parameter $2 must be text or varchar") {
		t.Fatalf("an int parameter: %v", err)
	}
	// The set's table resolved on the server's connection, the statement
	// reading a table of that name in another schema: refused.
	other := schema + "_other"
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+other+"; CREATE TABLE "+other+".users (email text, n int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pool.Exec(context.Background(), "DROP SCHEMA "+other+" CASCADE") })
	_, _, err = postgres.CheckAnswer(ctx, pool, table, other+".users", "email", "SELECT n FROM "+other+".users WHERE email = $1")
	if err == nil || !strings.Contains(err.Error(), "is not the set's table") {
		t.Fatalf("another schema's table: %v", err)
	}
}
