package pgwire

import (
	"context"
	"testing"
)

// TestPreparedNameReused: a session that prepares the answer statement
// under a name, then drops it with SQL (DEALLOCATE, DEALLOCATE ALL, DISCARD
// ALL, in any case, alone or among other statements, or in a DO block) and
// prepares another statement under the same name, gets that statement's
// rows through the front end, as straight from PostgreSQL: the name no
// longer means the answer statement.
func TestPreparedNameReused(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	other := "SELECT email, n FROM public." + f.table + " WHERE email <> $1"
	for _, drop := range []string{
		"DEALLOCATE n2",
		"deallocate prepare n2",
		"DEALLOCATE ALL",
		"DISCARD ALL",
		"SELECT 1; DEALLOCATE n2",
		`DO $$BEGIN EXECUTE 'DEALLOCATE n2'; END$$`,
	} {
		c := connectMode(t, f.front, 0)
		pc := c.PgConn()
		if _, err := pc.Prepare(ctx, "n2", q, nil); err != nil {
			t.Fatal(err)
		}
		for range 2 { // learns the shape, then answered locally
			res := pc.ExecPrepared(ctx, "n2", [][]byte{[]byte("absent")}, nil, nil).Read()
			if res.Err != nil || len(res.Rows) != 0 {
				t.Fatalf("the answer statement for an absent key: %v, %d rows", res.Err, len(res.Rows))
			}
		}
		for _, sql := range []string{drop, "PREPARE n2(text) AS " + other} {
			if _, err := pc.Exec(ctx, sql).ReadAll(); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
		}
		res := pc.ExecPrepared(ctx, "n2", [][]byte{[]byte("absent")}, nil, nil).Read()
		if res.Err != nil || len(res.Rows) != 100 {
			t.Errorf("after %s and PREPARE n2 as another statement: %v, %d rows, want the table's 100", drop, res.Err, len(res.Rows))
		}
		c.Close(ctx)
	}
}
