package pgwire

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestPgBouncer: the front end in front of PgBouncer in transaction
// pooling, in front of PostgreSQL. Through it, clients in the modes
// transaction pooling supports (unnamed statements, the simple protocol;
// PgBouncer 1.18 keeps no named statements across transactions) see the
// table's rows — present keys, a key another session just inserted, the
// session's own key inside and after its transaction — absent keys are
// answered locally once learned, and relayed statements, errors and
// transactions work.
func TestPgBouncer(t *testing.T) {
	dsn := testsvc.Postgres(t)
	ctx := context.Background()
	probe, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	upstream := net.JoinHostPort(probe.Config().Host, fmt.Sprint(probe.Config().Port))
	probeDB := probe.Config().Database
	probe.Close(ctx)
	bouncer := testsvc.PgBouncer(t, upstream, "transaction")
	f := newFrontEnd(t, func(c *Config) { c.Upstream = bouncer })
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	other, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close(ctx)

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol} {
		t.Run(mode.String(), func(t *testing.T) {
			c := connectMode(t, f.front, mode)
			lookup := func(k string) (int, error) {
				var n int
				err := c.QueryRow(ctx, q, k).Scan(new(string), &n)
				if err == pgx.ErrNoRows {
					return -1, nil
				}
				return n, err
			}
			want := func(k string, n int) {
				t.Helper()
				if got, err := lookup(k); err != nil || got != n {
					t.Fatalf("%s: %d %v, want %d", k, got, err, n)
				}
			}
			before := f.count(t, "bloomgate_pgwire_answered_total")
			want("k7", 7)
			for i := range 4 {
				want(fmt.Sprintf("bouncer-absent-%v-%d", mode, i), -1)
			}
			if n := f.count(t, "bloomgate_pgwire_answered_total") - before; n < 2 {
				t.Errorf("%v absent-key lookups answered locally through PgBouncer", n)
			}
			// Another session's insert, just before.
			k := fmt.Sprintf("bouncer-other-%v", mode)
			f.set.add(k)
			if _, err := other.Exec(ctx, "INSERT INTO "+f.table+" VALUES ($1, 100)", k); err != nil {
				t.Fatal(err)
			}
			want(k, 100)
			// The session's own key inside and after its transaction.
			own := fmt.Sprintf("bouncer-own-%v", mode)
			tx, err := c.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			f.set.add(own)
			if _, err := tx.Exec(ctx, "INSERT INTO "+f.table+" VALUES ($1, 101)", own); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := tx.QueryRow(ctx, q, own).Scan(new(string), &n); err != nil || n != 101 {
				t.Fatalf("own key in its transaction: %d %v", n, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			want(own, 101)
			// Relayed work: an aggregate, an error, and the session goes on.
			var count int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM "+f.table+" WHERE email LIKE 'k%'").Scan(&count); err != nil || count != 100 {
				t.Fatalf("count: %d %v", count, err)
			}
			_, err = c.Exec(ctx, "SELEC 1")
			var pe *pgconn.PgError
			if !errors.As(err, &pe) || pe.Code != "42601" {
				t.Fatalf("a syntax error: %v", err)
			}
			want("k8", 8)
		})
	}
	// The sessions went through PgBouncer: its pool has server connections.
	admin, err := pgx.Connect(ctx, "postgres://postgres@"+bouncer+"/pgbouncer?sslmode=disable&default_query_exec_mode=simple_protocol")
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	rows, err := admin.Query(ctx, "SHOW POOLS")
	if err != nil {
		t.Fatal(err)
	}
	servers := int64(0) // the pool's connections to PostgreSQL
	for rows.Next() {
		vals, _ := rows.Values()
		for i, fd := range rows.FieldDescriptions() {
			if n, ok := vals[i].(int32); ok && vals[0] == probeDB && strings.HasPrefix(fd.Name, "sv_") {
				servers += int64(n)
			}
		}
	}
	if rows.Err() != nil || servers < 1 {
		t.Errorf("PgBouncer has %d server connections for %s (%v): the front end did not go through it", servers, probeDB, rows.Err())
	}
	t.Run("cancel", func(t *testing.T) {
		// The client's cancel request reaches PgBouncer with PgBouncer's
		// key for the session, and PgBouncer cancels the query.
		c, err := pgx.Connect(ctx, f.front)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(ctx)
		go func() {
			time.Sleep(300 * time.Millisecond)
			c.PgConn().CancelRequest(ctx)
		}()
		start := time.Now()
		_, err = c.Exec(ctx, "SELECT pg_sleep(20)")
		var pe *pgconn.PgError
		if !errors.As(err, &pe) || pe.Code != "57014" || time.Since(start) > 10*time.Second {
			t.Fatalf("cancel through PgBouncer: %v after %v, want 57014", err, time.Since(start))
		}
	})
	t.Run("psql", func(t *testing.T) {
		if _, err := exec.LookPath("psql"); err != nil {
			testsvc.Unavailable(t, "psql: %v", err)
		}
		out, err := exec.Command("psql", "-X", "-At", f.front,
			"-c", "SELECT n FROM "+f.table+" WHERE email = 'k9'",
			"-c", "SELECT n FROM "+f.table+" WHERE email = 'psql-bouncer-absent'",
			"-c", "BEGIN", "-c", "SELECT 42", "-c", "COMMIT").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "9\nBEGIN\n42\nCOMMIT" {
			t.Fatalf("psql through the front end and PgBouncer: %v\n%s", err, out)
		}
	})
}
