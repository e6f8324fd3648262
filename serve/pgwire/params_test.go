package pgwire

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestSeveralParameters: a statement whose key is $2 and whose $1 is
// compared with another text column. In every pgx mode the front end
// gives what PostgreSQL gives — the row for a present key and its tenant,
// none for another tenant, none for an absent key (answered locally once
// learned, whatever the tenant, NULL included), the same Describe — and
// forwards a tenant PostgreSQL would refuse.
func TestSeveralParameters(t *testing.T) {
	var q string
	f := newFrontEnd(t, func(c *Config) {
		st := &c.Statements[0]
		admin, err := pgx.Connect(context.Background(), testsvc.Postgres(t))
		if err != nil {
			t.Fatal(err)
		}
		defer admin.Close(context.Background())
		if _, err := admin.Exec(context.Background(), "ALTER TABLE "+st.Table+" ADD COLUMN tenant text NOT NULL DEFAULT 't1'"); err != nil {
			t.Fatal(err)
		}
		q = "SELECT email, n FROM public." + st.Table + " WHERE tenant = $1 AND email = $2"
		st.SQL, st.ParamOIDs = q, []uint32{25, 25}
	})
	ctx := context.Background()
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			connect := func(dsn string) *pgx.Conn { return connectMode(t, dsn, mode) }
			front, direct := connect(f.front), connect(f.dsn)
			lookup := func(c *pgx.Conn, tenant any, key string) string {
				rows, err := c.Query(ctx, q, tenant, key)
				if err != nil {
					return "error " + err.Error()
				}
				var out string
				for rows.Next() {
					v, _ := rows.Values()
					out += fmt.Sprint(v)
				}
				if err := rows.Err(); err != nil {
					if pe, ok := err.(*pgconn.PgError); ok {
						return "error " + pe.Code
					}
					return "error " + err.Error()
				}
				return out
			}
			before := f.count(t, "bloomgate_pgwire_answered_total")
			for _, c := range []struct {
				tenant any
				key    string
				want   string
			}{
				{"t1", "k3", "[k3 3]"},
				{"t2", "k3", ""},
				{"t1", "absent-" + mode.String(), ""},
				{"t2", "absent-" + mode.String(), ""},
				{nil, "absent2-" + mode.String(), ""},
				{"t1", "absent3-" + mode.String(), ""},
				// Bytes that are not UTF-8: PostgreSQL's error where pgx
				// sends them as they are (prepared modes), else whatever
				// PostgreSQL makes of pgx's encoding.
				{[]byte{0xff}, "absent4-" + mode.String(), "as direct"},
			} {
				got, want := lookup(front, c.tenant, c.key), lookup(direct, c.tenant, c.key)
				if got != want || got != c.want && c.want != "as direct" {
					t.Errorf("tenant %v key %s: front %q, direct %q, want %q", c.tenant, c.key, got, want, c.want)
				}
			}
			if n := f.count(t, "bloomgate_pgwire_answered_total") - before; n < 2 {
				t.Errorf("%v absent-key lookups answered locally", n)
			}
		})
	}
}
