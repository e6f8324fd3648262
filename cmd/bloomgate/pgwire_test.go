package main

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// pgFront is a running server with the PostgreSQL front end in front of a
// private cluster whose users table a set follows.
type pgFront struct {
	pg       *testsvc.PG
	srv      *server
	addr     string // the front end
	httpAddr string
}

const frontAnswer = "SELECT email, name FROM public.users WHERE email = $1"

// frontConfig is what a test's server with the PostgreSQL front end
// differs in (see writeFrontConf).
type frontConfig struct {
	top string // top-level lines (postgres-maxclients, TLS …)
	set string // lines of set users after the common ones (answer, max-lag …)
	dsn string // the set's connection string; "": pg.DSN
}

// writeFrontConf writes a server config: the PostgreSQL front end on a free
// loopback address relaying to pg, and a set users following pg's users
// table by email (slot and publication bg_users, a cuckoo filter). It
// returns the config's path and the front end's, RESP and HTTP addresses.
func writeFrontConf(t testing.TB, pg *testsvc.PG, fc frontConfig) (conf, front, respAddr, httpAddr string) {
	t.Helper()
	if fc.dsn == "" {
		fc.dsn = pg.DSN
	}
	var set strings.Builder
	for l := range strings.Lines(strings.TrimSpace(fc.set)) {
		set.WriteString("  " + strings.TrimSpace(l) + "\n")
	}
	front = freeAddr(t)
	conf, respAddr, httpAddr = serveConf(t, t.TempDir(), fmt.Sprintf(`postgres-listen %s
postgres-upstream %s:%d
%s
set users {
  postgres %s
  table users
  column email
  slot bg_users
  publication bg_users
  kind cuckoo
%s}
`, front, pg.Host, pg.Port, fc.top, fc.dsn, set.String()))
	return conf, front, respAddr, httpAddr
}

// startPGFront starts a followed cluster with users(email text, name text)
// and the server with postgres-listen in front of it, and waits until the
// set is ready.
func startPGFront(t testing.TB, extra string) *pgFront {
	t.Helper()
	testsvc.Short(t, "starts a PostgreSQL cluster and the server")
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	pg.SQL(t, "INSERT INTO users SELECT 'user' || i || '@example.com', 'name' || i FROM generate_series(0, 999) i")
	conf, front, _, httpAddr := writeFrontConf(t, pg, frontConfig{top: extra, set: fmt.Sprintf(`max-lag 3s
answer %q
answer "SELECT 1 FROM public.users WHERE email = $1::text"
answer "SELECT public.users.email AS public_users_email, public.users.name AS public_users_name FROM public.users WHERE public.users.email = $1"`, frontAnswer)})
	srv := startServe(t, bin, "-config", conf)
	waitReadyz(t, httpAddr, 60*time.Second)
	return &pgFront{pg: pg, srv: srv, addr: front, httpAddr: httpAddr}
}

// dsn is the DSN of the front end (front) or of the database directly.
func (f *pgFront) dsn(front bool) string {
	if !front {
		return f.pg.DSN
	}
	host, port, _ := net.SplitHostPort(f.addr)
	return fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=disable", f.pg.User, host, port, f.pg.Database)
}

func (f *pgFront) connect(t *testing.T, front bool, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(f.dsn(front))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("connect (front %v): %v", front, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// metric sums the samples of a metric whose labels contain every want.
func (f *pgFront) metric(t *testing.T, name string, want ...string) float64 {
	t.Helper()
	resp, err := http.Get("http://" + f.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		ok := true
		for _, w := range want {
			ok = ok && strings.Contains(line, w)
		}
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("%s: %v", line, err)
		}
		sum += v
	}
	return sum
}

// result is what a client saw for one query: rows, columns, error code.
type result struct {
	Cols []string
	OIDs []uint32
	Rows [][]any
	Code string
}

func query(c *pgx.Conn, sql string, args ...any) result {
	var r result
	rows, err := c.Query(context.Background(), sql, args...)
	if err == nil {
		for _, fd := range rows.FieldDescriptions() {
			r.Cols = append(r.Cols, fd.Name)
			r.OIDs = append(r.OIDs, fd.DataTypeOID)
		}
		for rows.Next() {
			v, verr := rows.Values()
			if verr != nil {
				err = verr
				break
			}
			r.Rows = append(r.Rows, v)
		}
		rows.Close()
		if err == nil {
			err = rows.Err()
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		r.Code = pe.Code
	} else if err != nil {
		r.Code = "client: " + err.Error()
	}
	return r
}

// TestPGFrontPgx: pgx through the front end sees what it sees straight
// from PostgreSQL — present keys, absent keys, a key another session
// inserted just before, the session's own key inside and after its
// transaction, errors — in every pgx query mode (named and unnamed
// prepared statements, binary and text parameters, the simple protocol with
// literals); absent keys are answered locally once the statement's shape
// is learned.
func TestPGFrontPgx(t *testing.T) {
	f := startPGFront(t, "")
	ctx := context.Background()
	writer := f.connect(t, false, pgx.QueryExecModeCacheStatement)
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	for _, mode := range modes {
		t.Run(mode.String(), func(t *testing.T) {
			direct := f.connect(t, false, mode)
			front := f.connect(t, true, mode)
			same := func(what, sql string, args ...any) result {
				t.Helper()
				want, got := query(direct, sql, args...), query(front, sql, args...)
				if !reflect.DeepEqual(want, got) {
					t.Fatalf("%s: %s %v:\nfront  %+v\ndirect %+v", what, sql, args, got, want)
				}
				return got
			}
			before := f.metric(t, "bloomgate_pgwire_answered_total")
			for i := range 20 {
				if r := same("present", frontAnswer, fmt.Sprintf("user%d@example.com", i)); len(r.Rows) != 1 {
					t.Fatalf("present key: %+v", r)
				}
				same("absent", frontAnswer, fmt.Sprintf("absent%d-%s@example.com", i, mode))
				same("absent, cast", "SELECT 1 FROM public.users WHERE email = $1::text", fmt.Sprintf("absent%d@example.com", i))
				same("quote", frontAnswer, fmt.Sprintf("o'brien%d\\x@example.com", i))
			}
			if mode != pgx.QueryExecModeExec && mode != pgx.QueryExecModeDescribeExec {
				// Exec and DescribeExec re-describe every time: the
				// statement is answered locally only where the batch
				// holds nothing else (see docs/serve.md).
				if after := f.metric(t, "bloomgate_pgwire_answered_total"); after-before < 20 {
					t.Errorf("only %v absent-key lookups answered locally; metrics:\nforwarded %v", after-before,
						f.metric(t, "bloomgate_pgwire_forwarded_total"))
				}
			}
			// A key another session inserted just before: never missed.
			for i := range 100 {
				k := fmt.Sprintf("new-%s-%d@example.com", mode, i)
				if _, err := writer.Exec(ctx, "INSERT INTO users VALUES ($1, 'new')", k); err != nil {
					t.Fatal(err)
				}
				if r := query(front, frontAnswer, k); len(r.Rows) != 1 {
					t.Fatalf("a key committed by another session just before is missing: %+v", r)
				}
			}
			// The session's own key, inside its transaction and after.
			k := fmt.Sprintf("own-%s@example.com", mode)
			tx, err := front.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO users VALUES ($1, 'own')", k); err != nil {
				t.Fatal(err)
			}
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM ("+frontAnswer+") s", k).Scan(&n); err != nil || n != 1 {
				t.Fatalf("own key inside the transaction: %d %v", n, err)
			}
			if r := query(tx.Conn(), frontAnswer, k); len(r.Rows) != 1 {
				t.Fatalf("own key inside the transaction: %+v", r)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if r := query(front, frontAnswer, k); len(r.Rows) != 1 {
				t.Fatalf("own key after commit: %+v", r)
			}
			// A rolled-back key stays absent; errors are PostgreSQL's.
			tx, _ = front.Begin(ctx)
			tx.Exec(ctx, "INSERT INTO users VALUES ('rolledback@example.com', 'x')")
			tx.Rollback(ctx)
			same("rolled back", frontAnswer, "rolledback@example.com")
			same("syntax error", "SELEC 1")
			same("no table", "SELECT * FROM nosuch WHERE email = $1", "x")
			same("duplicate", "INSERT INTO users VALUES ('user1@example.com', 'dup')")
			same("after an error", frontAnswer, "absent-after-error@example.com")
		})
	}
	if n := f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="present"`); n == 0 {
		t.Errorf("no forward counted as present")
	}
}

// TestPGFrontRelay: what the front end only relays works as straight to
// PostgreSQL: password, MD5 and SCRAM authentication by the database (the
// front end never sees a password it could use), COPY in and out,
// LISTEN/NOTIFY, notices, a cancel request reaching the right backend, DDL
// dropping the learned shape.
func TestPGFrontRelay(t *testing.T) {
	f := startPGFront(t, "")
	ctx := context.Background()

	// The database's own authentication, passed through.
	for _, m := range []string{"password", "md5", "scram-sha-256"} {
		enc := "scram-sha-256"
		if m == "md5" {
			enc = "md5"
		}
		role := "auth_" + strings.ReplaceAll(m, "-", "_")
		f.pg.SQL(t, "SET password_encryption = '"+enc+"'", "CREATE ROLE "+role+" LOGIN PASSWORD 'right'", "GRANT SELECT ON users TO "+role)
	}
	hba := filepath.Join(f.pg.DataDir, "pg_hba.conf")
	old, err := os.ReadFile(hba)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, hba, "host all auth_password 127.0.0.1/32 password\nhost all auth_md5 127.0.0.1/32 md5\n"+
		"host all auth_scram_sha_256 127.0.0.1/32 scram-sha-256\n"+string(old))
	f.pg.SQL(t, "SELECT pg_reload_conf()")
	for _, role := range []string{"auth_password", "auth_md5", "auth_scram_sha_256"} {
		for _, pw := range []string{"right", "wrong"} {
			connect := func(front bool) (string, error) {
				u := strings.Replace(f.dsn(front), f.pg.User+"@", role+":"+pw+"@", 1)
				if !front {
					u = fmt.Sprintf("postgres://%s:%s@%s:%d/%s?sslmode=disable", role, pw, f.pg.Host, f.pg.Port, f.pg.Database)
				}
				c, err := pgx.Connect(ctx, u)
				if err != nil {
					var pe *pgconn.PgError
					if errors.As(err, &pe) {
						return pe.Code, nil
					}
					return "", err
				}
				defer c.Close(ctx)
				var who string
				err = c.QueryRow(ctx, "SELECT current_user").Scan(&who)
				return who, err
			}
			d, derr := connect(false)
			fr, ferr := connect(true)
			if derr != nil || ferr != nil || d != fr {
				t.Errorf("%s with the %s password: front %q %v, direct %q %v", role, pw, fr, ferr, d, derr)
			}
			if pw == "right" && fr != role || pw == "wrong" && fr != "28P01" {
				t.Errorf("%s with the %s password: %q", role, pw, fr)
			}
		}
	}
	front := f.connect(t, true, pgx.QueryExecModeCacheStatement)

	// COPY in and out.
	n, err := front.CopyFrom(ctx, pgx.Identifier{"users"}, []string{"email", "name"},
		pgx.CopyFromSlice(500, func(i int) ([]any, error) { return []any{fmt.Sprintf("copy%d@example.com", i), "c"}, nil }))
	if err != nil || n != 500 {
		t.Fatalf("COPY FROM: %d %v", n, err)
	}
	var out strings.Builder
	tag, err := front.PgConn().CopyTo(ctx, &out, "COPY (SELECT email FROM users WHERE name = 'c' ORDER BY email) TO STDOUT")
	if err != nil || tag.RowsAffected() != 500 || !strings.HasPrefix(out.String(), "copy0@example.com\n") {
		t.Fatalf("COPY TO: %v %v %.40q", tag, err, out.String())
	}
	if r := query(front, frontAnswer, "copy7@example.com"); len(r.Rows) != 1 {
		t.Fatalf("a key written by COPY: %+v", r)
	}

	// LISTEN/NOTIFY and a notice.
	listener := f.connect(t, true, pgx.QueryExecModeCacheStatement)
	if _, err := listener.Exec(ctx, "LISTEN ch"); err != nil {
		t.Fatal(err)
	}
	if _, err := front.Exec(ctx, "NOTIFY ch, 'hello'"); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	nt, err := listener.WaitForNotification(wctx)
	cancel()
	if err != nil || nt.Payload != "hello" || nt.Channel != "ch" {
		t.Fatalf("notification: %+v %v", nt, err)
	}
	var notices []string
	cfg, _ := pgx.ParseConfig(f.dsn(true))
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) { notices = append(notices, n.Message) }
	nc, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close(ctx)
	if _, err := nc.Exec(ctx, "DO $$ BEGIN RAISE NOTICE 'note %', 1; END $$"); err != nil || len(notices) != 1 || notices[0] != "note 1" {
		t.Fatalf("notice: %v %v", notices, err)
	}

	// A cancel request from the front end's BackendKeyData reaches the
	// backend running the query.
	start := time.Now()
	go func() {
		time.Sleep(300 * time.Millisecond)
		front.PgConn().CancelRequest(ctx) // a connection of its own: safe beside the query
	}()
	_, err = front.Exec(ctx, "SELECT pg_sleep(20)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "57014" || time.Since(start) > 10*time.Second {
		t.Fatalf("cancel: %v after %v (want 57014 query_canceled)", err, time.Since(start))
	}

	// DDL through the front end: the new column appears in the answer.
	absent := func(c *pgx.Conn) result { return query(c, frontAnswer, "ddl-absent@example.com") }
	absent(front)
	absent(front)
	if _, err := front.Exec(ctx, "ALTER TABLE users ALTER COLUMN name TYPE varchar(100)"); err != nil {
		t.Fatal(err)
	}
	fresh := f.connect(t, true, pgx.QueryExecModeCacheStatement)
	direct := f.connect(t, false, pgx.QueryExecModeCacheStatement)
	for range 3 {
		if got, want := absent(fresh), absent(direct); !reflect.DeepEqual(got, want) {
			t.Fatalf("after ALTER TABLE: front %+v, direct %+v", got, want)
		}
	}
}

// TestPGFrontHostile: a bad startup packet, an oversized message and too
// many connections get a PostgreSQL error and a closed connection; the
// server goes on.
func TestPGFrontHostile(t *testing.T) {
	f := startPGFront(t, "postgres-maxclients 3\npostgres-max-message-size 1kb")
	readError := func(c net.Conn) string {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := io.ReadAll(c)
		if len(b) == 0 || b[0] != 'E' {
			t.Fatalf("want an ErrorResponse, got %q (%v)", b, err)
		}
		return string(b)
	}
	for _, pkt := range [][]byte{
		{0, 0, 0, 8, 0, 0, 0, 0},                           // unknown protocol
		{0xff, 0xff, 0xff, 0xff, 1, 2, 3},                  // negative length
		{0, 0, 0, 3},                                       // too short
		append([]byte{0, 1, 0, 0}, make([]byte, 70000)...), // too long
	} {
		c, err := net.Dial("tcp", f.addr)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(pkt)
		if e := readError(c); !strings.Contains(e, "08P01") {
			t.Errorf("bad startup %x…: %q", pkt[:4], e)
		}
		c.Close()
	}
	// A message over postgres-max-message-size.
	c := f.connect(t, true, pgx.QueryExecModeSimpleProtocol)
	_, err := c.Exec(context.Background(), "SELECT '"+strings.Repeat("x", 2000)+"'")
	if err == nil {
		t.Fatal("an oversized message was accepted")
	}
	c.Close(context.Background())
	// The connection limit: three open, the fourth refused.
	var open []*pgx.Conn
	for range 3 {
		open = append(open, f.connect(t, true, pgx.QueryExecModeSimpleProtocol))
	}
	_, err = pgx.Connect(context.Background(), f.dsn(true))
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "53300" {
		t.Fatalf("a fourth connection: %v, want 53300", err)
	}
	for _, o := range open {
		o.Close(context.Background())
	}
	// The server goes on.
	testsvc.Eventually(t, 5*time.Second, func() bool {
		c, err := pgx.Connect(context.Background(), f.dsn(true))
		if err == nil {
			c.Close(context.Background())
		}
		return err == nil
	}, "the front end does not accept connections after the hostile ones")
}

// TestPGFrontClients: psql, psycopg2 and PHP PDO_pgsql (native and
// emulated prepares) print the same through the front end as straight to
// PostgreSQL, for present, absent, just-inserted and own-transaction keys.
func TestPGFrontClients(t *testing.T) {
	f := startPGFront(t, "")
	host, port, _ := net.SplitHostPort(f.addr)
	// answered checks that a client's absent-key lookups were answered
	// locally (each client looks up absent keys in three rounds).
	answered := func(t *testing.T, before float64, labels ...string) {
		t.Helper()
		if n := f.metric(t, "bloomgate_pgwire_answered_total", labels...) - before; n < 2 {
			t.Errorf("%v absent-key lookups answered locally; forwarded by reason: not_learned %v, present %v, lag %v, batch %v, session %v, transaction %v", n,
				f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="not_learned"`), f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="present"`),
				f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="lag"`), f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="batch"`),
				f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="session"`), f.metric(t, "bloomgate_pgwire_forwarded_total", `reason="transaction"`))
		}
	}
	run := func(t *testing.T, name string, args ...string) string {
		t.Helper()
		out, err := exec.Command(name, args...).CombinedOutput()
		if err != nil {
			t.Fatalf("%s %v: %v\n%s", name, args, err, out)
		}
		return string(out)
	}
	t.Run("psql", func(t *testing.T) {
		if _, err := exec.LookPath("psql"); err != nil {
			testsvc.Unavailable(t, "psql: %v", err)
		}
		script := `SELECT email, name FROM public.users WHERE email = 'user5@example.com';
SELECT email, name FROM public.users WHERE email = 'nobody@example.com';
SELECT email, name FROM public.users WHERE email = E'no\\body@example.com';
PREPARE q(text) AS SELECT email, name FROM public.users WHERE email = $1;
EXECUTE q('nobody@example.com');
BEGIN;
INSERT INTO users VALUES ('psql-own-' || :'who' || '@example.com', 'own');
SELECT email FROM users WHERE email = 'psql-own-' || :'who' || '@example.com';
COMMIT;
SELECT email, name FROM public.users WHERE email = 'nobody2@example.com';
SELEC 1;
SELECT email, name FROM public.users WHERE email = 'nobody3@example.com';
`
		// psql -f sends each statement as a simple query.
		file := filepath.Join(t.TempDir(), "q.sql")
		writeFile(t, file, script)
		psql := func(h, p, who string) string {
			return run(t, "psql", "-X", "-h", h, "-p", p, "-U", f.pg.User, "-d", f.pg.Database, "-v", "who="+who, "-f", file)
		}
		before := f.metric(t, "bloomgate_pgwire_answered_total")
		defer answered(t, before)
		for i := range 3 { // the later runs are answered from the learned shape
			d := psql(f.pg.Host, strconv.Itoa(f.pg.Port), fmt.Sprintf("d%d", i))
			fr := psql(host, port, fmt.Sprintf("f%d", i))
			if strings.ReplaceAll(fr, fmt.Sprintf("f%d@", i), fmt.Sprintf("d%d@", i)) != d {
				t.Errorf("psql -f run %d differs:\nfront:\n%s\ndirect:\n%s", i, fr, d)
			}
		}
	})
	t.Run("psycopg2", func(t *testing.T) {
		testsvc.PythonModule(t, "python3-psycopg2", "psycopg2")
		py := func(h, p, who string) string {
			return run(t, "/usr/bin/python3", "testdata/pgwire/client.py", fmt.Sprintf("host=%s port=%s user=%s dbname=%s", h, p, f.pg.User, f.pg.Database), who)
		}
		defer answered(t, f.metric(t, "bloomgate_pgwire_answered_total"))
		direct := py(f.pg.Host, strconv.Itoa(f.pg.Port), "py")
		front := py(host, port, "pf")
		if strings.ReplaceAll(front, "pf", "py") != direct {
			t.Errorf("psycopg2 differs:\nfront:\n%s\ndirect:\n%s", front, direct)
		}
	})
	t.Run("sqlalchemy", func(t *testing.T) {
		testsvc.PythonModule(t, "python3-sqlalchemy python3-psycopg2", "sqlalchemy", "psycopg2")
		defer answered(t, f.metric(t, "bloomgate_pgwire_answered_total", `statement="3"`), `statement="3"`)
		orm := func(h, p, who string) string {
			return run(t, "/usr/bin/python3", "testdata/pgwire/orm.py", fmt.Sprintf("postgresql+psycopg2://%s@%s:%s/%s", f.pg.User, h, p, f.pg.Database), who)
		}
		direct := orm(f.pg.Host, strconv.Itoa(f.pg.Port), "od")
		front := orm(host, port, "of")
		if strings.ReplaceAll(front, "of", "od") != direct {
			t.Errorf("SQLAlchemy differs:\nfront:\n%s\ndirect:\n%s", front, direct)
		}
	})
	for _, emulate := range []string{"native", "emulated"} {
		t.Run("pdo-"+emulate, func(t *testing.T) {
			testsvc.PHPExtension(t, "pdo_pgsql", "php-pgsql")
			php := func(h, p, who string) string {
				return run(t, "php", "testdata/pgwire/client.php", fmt.Sprintf("pgsql:host=%s;port=%s;dbname=%s", h, p, f.pg.Database), f.pg.User, emulate, who)
			}
			defer answered(t, f.metric(t, "bloomgate_pgwire_answered_total"))
			direct := php(f.pg.Host, strconv.Itoa(f.pg.Port), "d"+emulate)
			front := php(host, port, "f"+emulate)
			if strings.ReplaceAll(front, "f"+emulate, "d"+emulate) != direct {
				t.Errorf("PDO %s differs:\nfront:\n%s\ndirect:\n%s", emulate, front, direct)
			}
		})
	}
	if n := f.metric(t, "bloomgate_pgwire_answered_total"); n == 0 {
		t.Errorf("no client's absent-key lookup was answered locally; forwarded: %v", f.metric(t, "bloomgate_pgwire_forwarded_total"))
	}
}

func writeFile(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestPGFrontConfigErrors: a statement the front end cannot answer safely,
// and a front end configured by halves, are errors within seconds naming
// the set and the statement.
func TestPGFrontConfigErrors(t *testing.T) {
	testsvc.Short(t, "starts a PostgreSQL cluster")
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	pg.SQL(t, "CREATE TABLE nums (id int PRIMARY KEY)", "CREATE PUBLICATION bg_nums FOR TABLE nums",
		"CREATE SCHEMA other", "CREATE TABLE other.users (email text PRIMARY KEY, name text)")
	set := func(table, column, answer string) string {
		return fmt.Sprintf("set %s {\n  postgres %s\n  table %s\n  column %s\n  slot bg_%s\n  publication bg_%s\n  answer %q\n}\n",
			table, pg.DSN, table, column, table, table, answer)
	}
	front := fmt.Sprintf("postgres-listen %s\npostgres-upstream %s:%d\n", freeAddr(t), pg.Host, pg.Port)
	runServeFail(t, bin, front+set("users", "email", "SELECT count(*) FROM users WHERE email = $1"), 10*time.Second,
		`set "users": answer "SELECT count(*) FROM users WHERE email = $1": function call count(…) is not allowed`)
	runServeFail(t, bin, front+set("users", "email", "SELECT email FROM users WHERE lower(email) = $1"), 10*time.Second,
		`set "users"`, "function call lower(…)")
	runServeFail(t, bin, front+set("users", "email", "SELECT email FROM users WHERE email = $1 OR true"), 10*time.Second,
		`set "users"`, `"OR" is not allowed`)
	runServeFail(t, bin, front+set("nums", "id", "SELECT id FROM public.nums WHERE id = $1"), 30*time.Second,
		`set "nums": answer "SELECT id FROM public.nums WHERE id = $1": column nums.id is not text or varchar`)
	// A table named without its schema means what each session's
	// search_path makes it; another schema's table of the same name is not
	// the table the set follows.
	runServeFail(t, bin, front+set("users", "email", "SELECT email FROM users WHERE email = $1"), 10*time.Second,
		`set "users": answer "SELECT email FROM users WHERE email = $1": FROM users: name the table with its schema (FROM public.users)`)
	runServeFail(t, bin, front+set("users", "email", "SELECT email FROM other.users WHERE email = $1"), 30*time.Second,
		`set "users": answer "SELECT email FROM other.users WHERE email = $1": FROM other.users is not the set's table users (public.users)`)
	runServeFail(t, bin, set("users", "email", frontAnswer), 10*time.Second, `set "users": answer: give postgres-listen`)
	runServeFail(t, bin, fmt.Sprintf("postgres-listen %s\n", freeAddr(t)), 10*time.Second, "postgres-listen: give postgres-upstream")
}

// BenchmarkPGFrontPgbench runs pgbench's TPC-B-like transactions (simple
// and prepared protocol; every statement forwarded: none is an answer
// statement) straight to PostgreSQL, through the front end and through
// PgBouncer (session pooling: a relay as the front end is, the peer to
// compare with), in interleaved rounds, and reports each path's median
// transactions per second and its ratio to direct.
// BLOOMGATE_PGBENCH_ROUNDS sets the rounds (default 3), BLOOMGATE_PGBENCH_TIME
// each run's seconds (default 10).
//
//	go test -run XXX -bench PGFrontPgbench -benchtime 1x ./cmd/bloomgate
func BenchmarkPGFrontPgbench(b *testing.B) {
	if _, err := exec.LookPath("pgbench"); err != nil {
		testsvc.Unavailable(b, "pgbench: %v", err)
	}
	rounds, seconds := int(envFloat(b, "BLOOMGATE_PGBENCH_ROUNDS", 3)), int(envFloat(b, "BLOOMGATE_PGBENCH_TIME", 10))
	f := startPGFront(b, "")
	upstream := fmt.Sprintf("%s:%d", f.pg.Host, f.pg.Port)
	paths := []struct{ name, addr string }{
		{"direct", upstream},
		{"front", f.addr},
		{"pgbouncer", testsvc.PgBouncer(b, upstream, "session")},
	}
	pgbench := func(addr string, args ...string) string {
		h, p, _ := net.SplitHostPort(addr)
		args = append([]string{"-h", h, "-p", p, "-U", f.pg.User}, append(args, f.pg.Database)...)
		out, err := exec.Command("pgbench", args...).CombinedOutput()
		if err != nil {
			b.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	pgbench(upstream, "-i", "-q", "-s", "2")
	for _, mode := range []string{"simple", "prepared"} {
		b.Run(mode, func(b *testing.B) {
			tps := make([][]float64, len(paths))
			for b.Loop() {
				for range rounds {
					for i, p := range paths {
						out := pgbench(p.addr, "-n", "-c", "4", "-j", "2", "-T", strconv.Itoa(seconds), "-M", mode)
						_, rest, ok := strings.Cut(out, "tps = ")
						if !ok {
							b.Fatalf("no tps in:\n%s", out)
						}
						v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
						if err != nil {
							b.Fatal(err)
						}
						tps[i] = append(tps[i], v)
					}
				}
			}
			direct := median(tps[0])
			for i, p := range paths {
				b.ReportMetric(median(tps[i]), "tps-"+p.name)
				if i > 0 {
					b.ReportMetric(median(tps[i])/direct, p.name+"/direct")
				}
			}
		})
	}
}

// median is the middle of xs (the mean of the two middle ones for an even count).
func median(xs []float64) float64 {
	s := slices.Sorted(slices.Values(xs))
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TestPGFrontReadyz: /readyz shows the front end's upstream, ready with its
// check's round trip; with the upstream stopped it says so (and /readyz is
// 503), and ready again once it is back.
func TestPGFrontReadyz(t *testing.T) {
	f := startPGFront(t, "")
	upstream := func() map[string]any {
		resp, err := http.Get("http://" + f.httpAddr + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var body struct {
			Dependencies map[string]map[string]any `json:"dependencies"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
			t.Fatal(err)
		}
		u := body.Dependencies["postgres-upstream"]
		u["status"] = resp.StatusCode
		return u
	}
	u := upstream()
	if u["ready"] != true || u["status"] != 200 || u["latency_seconds"].(float64) <= 0 || u["addr"] != fmt.Sprintf("%s:%d", f.pg.Host, f.pg.Port) {
		t.Fatalf("/readyz's upstream: %v", u)
	}
	f.pg.Stop(t)
	testsvc.Eventually(t, 20*time.Second, func() bool { u = upstream(); return u["ready"] == false }, "/readyz still has the stopped upstream ready: %v", u)
	if u["status"] != 503 || u["error"] == "" {
		t.Errorf("/readyz with the upstream stopped: %v", u)
	}
	f.pg.Start(t)
	testsvc.Eventually(t, 20*time.Second, func() bool { u = upstream(); return u["ready"] == true }, "/readyz never has the upstream back: %v", u)
}

// TestPGFrontTLS: with tls-cert-file and tls-key-file the front end
// accepts psql's and pgx's TLS (verify-full against the certificate), and
// a postgres-upstream URL with sslmode=require reaches PostgreSQL over
// TLS: the binary's wiring of what serve/pgwire's TLS tests check in depth.
func TestPGFrontTLS(t *testing.T) {
	t.Parallel()
	dsn := testsvc.Postgres(t)
	ctx := context.Background()
	direct, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	var ssl string
	direct.QueryRow(ctx, "SHOW ssl").Scan(&ssl)
	upstream := fmt.Sprintf("%s:%d", direct.Config().Host, direct.Config().Port)
	user, db := direct.Config().User, direct.Config().Database
	direct.Close(ctx)
	if ssl != "on" {
		testsvc.Unavailable(t, "the shared PostgreSQL has ssl = %q: upstream TLS cannot be tested", ssl)
	}
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	writeSelfSigned(t, certFile, keyFile)
	front := freeAddr(t)
	conf, _, _ := serveConf(t, dir, fmt.Sprintf("tls-cert-file %s\ntls-key-file %s\npostgres-listen %s\npostgres-upstream \"postgres://%s/?sslmode=require\"\n",
		certFile, keyFile, front, upstream))
	startServe(t, buildBinary(t), "-config", conf)
	host, port, _ := net.SplitHostPort(front)
	url := fmt.Sprintf("postgres://%s@%s:%s/%s?sslmode=verify-full&sslrootcert=%s", user, host, port, db, certFile)

	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	var upstreamSSL bool
	if err := c.QueryRow(ctx, "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()").Scan(&upstreamSSL); err != nil || !upstreamSSL {
		t.Errorf("the upstream connection: ssl %v, %v; want TLS", upstreamSSL, err)
	}
	if _, ok := c.PgConn().Conn().(*tls.Conn); !ok {
		t.Errorf("pgx's connection to the front end is %T, not TLS", c.PgConn().Conn())
	}
	if _, err := exec.LookPath("psql"); err != nil {
		testsvc.Unavailable(t, "psql: %v", err)
	}
	out, err := exec.Command("psql", "-X", "-At", url, "-c", `\conninfo`, "-c", "SELECT 7").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "SSL connection (protocol: TLS") || !strings.HasSuffix(string(out), "\n7\n") {
		t.Errorf("psql sslmode=verify-full: %v\n%s", err, out)
	}
}

// writeSelfSigned writes a self-signed certificate for 127.0.0.1 and its
// key as PEM.
func writeSelfSigned(t *testing.T, certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bloomgate test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:   time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, certFile, string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})))
	writeFile(t, keyFile, string(pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})))
}
