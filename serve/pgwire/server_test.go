package pgwire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// tableSet is a set kept in step with a test's table by the test itself
// (keys are added before their rows commit, as BF.ADD before commit), with
// a position and readiness the test sets.
type tableSet struct {
	mu      sync.Mutex
	keys    map[string]bool
	lagging atomic.Bool
	ready   atomic.Bool
	changed chan struct{} // closed when lagging changes (guarded by mu)
}

func (s *tableSet) Ready() bool { return s.ready.Load() }
func (s *tableSet) Position() changefeed.Position {
	if s.lagging.Load() {
		return 0
	}
	return ^changefeed.Position(0)
}
func (s *tableSet) MayContainAt(key []byte, pos changefeed.Position) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[string(key)] || pos > s.Position() || !s.Ready()
}
func (s *tableSet) PositionChanged() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed == nil {
		s.changed = make(chan struct{})
	}
	return s.changed
}

// setLagging moves the position back to 0 (true) or to its maximum.
func (s *tableSet) setLagging(lag bool) {
	s.lagging.Store(lag)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.changed != nil {
		close(s.changed)
		s.changed = nil
	}
}

func (s *tableSet) add(k string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.keys[k] = true
}

type frontEnd struct {
	srv   *Server
	set   *tableSet
	reg   *prometheus.Registry
	front string // DSN through the front end
	dsn   string // DSN straight to PostgreSQL
	table string
}

// direct opens a connection straight to PostgreSQL, closed at the test's end.
func (f *frontEnd) direct(t testing.TB) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(context.Background(), f.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// newFrontEnd serves a front end over the shared PostgreSQL with one set
// over a table of this test's; each tweak may change the Config first.
func newFrontEnd(t testing.TB, tweaks ...func(*Config)) *frontEnd {
	t.Helper()
	dsn := testsvc.Postgres(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close(ctx) })
	b := make([]byte, 4)
	rand.Read(b)
	table := "pgwire_" + hex.EncodeToString(b)
	if _, err := admin.Exec(ctx, "CREATE TABLE "+table+" (email text PRIMARY KEY, n int)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Exec(ctx, "DROP TABLE "+table) })
	set := &tableSet{keys: map[string]bool{}}
	set.ready.Store(true)
	for i := range 100 {
		k := fmt.Sprintf("k%d", i)
		set.add(k)
		admin.Exec(ctx, "INSERT INTO "+table+" VALUES ($1, $2)", k, i)
	}
	cfg := admin.Config()
	// The position read as bloomgate serve reads it.
	positions, err := postgres.NewPositionReader(ctx, dsn, DefaultPositionTimeout)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { positions.Close() })
	reg := prometheus.NewRegistry()
	conf := Config{
		Upstream: net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)),
		Statements: []Statement{{SetName: "s", SQL: "SELECT email, n FROM public." + table + " WHERE email = $1", Table: table, Column: "email",
			Database: cfg.Database, ParamOIDs: []uint32{25}, Set: set, ReadPosition: positions.Read}},
		Registerer: reg,
	}
	for _, tw := range tweaks {
		tw(&conf)
	}
	srv, err := New(conf)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	front := strings.Replace(dsn, net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port)), ln.Addr().String(), 1)
	if front == dsn {
		t.Fatalf("cannot point %s at the front end", dsn)
	}
	return &frontEnd{srv: srv, set: set, reg: reg, front: front, dsn: dsn, table: table}
}

// connectMode connects to dsn with pgx in mode, closed when t ends.
func connectMode(t testing.TB, dsn string, mode pgx.QueryExecMode) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = mode
	c, err := pgx.ConnectConfig(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// absentLookup is the front end's answer statement, and a lookup of a key
// the table does not hold through c, which fails t unless it finds no row.
func (f *frontEnd) absentLookup(t *testing.T, c *pgx.Conn) (q string, lookup func(k string)) {
	q = "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	return q, func(k string) {
		t.Helper()
		if err := c.QueryRow(context.Background(), q, k).Scan(new(string), new(int)); err != pgx.ErrNoRows {
			t.Fatalf("%s: %v", k, err)
		}
	}
}

func (f *frontEnd) count(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, lp := range m.GetLabel() {
					found = found || lp.GetName() == labels[i] && lp.GetValue() == labels[i+1]
				}
				if !found {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue()
		}
	}
	return sum
}

// TestConcurrentSessions: sessions in every pgx mode, with pipelined
// batches, concurrently, see the rows the table holds; absent keys are
// answered locally; run under -race in CI.
func TestConcurrentSessions(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	modes := []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe,
		pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec, pgx.QueryExecModeSimpleProtocol}
	var wg sync.WaitGroup
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cfg, _ := pgx.ParseConfig(f.front)
			cfg.DefaultQueryExecMode = modes[w%len(modes)]
			c, err := pgx.ConnectConfig(ctx, cfg)
			if err != nil {
				t.Error(err)
				return
			}
			defer c.Close(ctx)
			for i := range 60 {
				present := fmt.Sprintf("k%d", (i*7+w)%100)
				absent := fmt.Sprintf("absent-%d-%d", w, i)
				// A key added now, by this session, outside a transaction.
				mine := fmt.Sprintf("mine-%d-%d", w, i)
				f.set.add(mine)
				if _, err := c.Exec(ctx, "INSERT INTO "+f.table+" VALUES ($1, $2)", mine, i); err != nil {
					t.Error(err)
					return
				}
				batch := &pgx.Batch{}
				for _, k := range []string{present, absent, mine, absent + "x", present} {
					batch.Queue(q, k)
				}
				br := c.SendBatch(ctx, batch)
				for j, want := range []int{1, 0, 1, 0, 1} {
					rows, _ := br.Query()
					got := 0
					for rows.Next() {
						got++
					}
					if err := rows.Err(); err != nil || got != want {
						t.Errorf("worker %d (%v) query %d: %d rows, %v; want %d", w, cfg.DefaultQueryExecMode, j, got, err, want)
					}
				}
				if err := br.Close(); err != nil {
					t.Error(err)
				}
				var n int
				err := c.QueryRow(ctx, q, absent).Scan(new(string), &n)
				if err != pgx.ErrNoRows {
					t.Errorf("absent key: %v", err)
				}
			}
		}()
	}
	wg.Wait()
	if n := f.count(t, "bloomgate_pgwire_answered_total"); n < 100 {
		t.Errorf("%v lookups answered locally", n)
	}
	t.Logf("answered %v, forwarded %v", f.count(t, "bloomgate_pgwire_answered_total"), f.count(t, "bloomgate_pgwire_forwarded_total"))
}

// TestForwardReasons: a set not ready, or behind the insert position, has
// every lookup forwarded, counted by reason.
func TestForwardReasons(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, f.front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	q, lookup := f.absentLookup(t, c)
	lookup("a") // learns the shape
	lookup("b")
	if n := testutil.ToFloat64(f.srv.table()[0].local); n != 1 {
		t.Fatalf("answered %v, want 1", n)
	}
	f.set.setLagging(true)
	lookup("c")
	f.set.setLagging(false)
	f.set.ready.Store(false)
	lookup("d")
	f.set.ready.Store(true)
	tx, _ := c.Begin(ctx)
	if err := tx.QueryRow(ctx, q, "e").Scan(new(string), new(int)); err != pgx.ErrNoRows {
		t.Fatal(err)
	}
	tx.Rollback(ctx)
	lookup("k1x")
	// SHOW leaves the session answerable; SET search_path does not.
	if _, err := c.Exec(ctx, "SHOW search_path"); err != nil {
		t.Fatal(err)
	}
	lookup("f")
	if _, err := c.Exec(ctx, "SET search_path = public"); err != nil {
		t.Fatal(err)
	}
	lookup("g")
	for reason, want := range map[string]float64{ReasonNotLearned: 1, ReasonLag: 1, ReasonNotReady: 1, ReasonTransaction: 1, ReasonSession: 1} {
		if got := f.count(t, "bloomgate_pgwire_forwarded_total", "reason", reason); got != want {
			t.Errorf("forwarded for %s: %v, want %v", reason, got, want)
		}
	}
	if n := testutil.ToFloat64(f.srv.table()[0].local); n != 3 {
		t.Errorf("answered %v, want 3", n)
	}
}

// TestPositionReadTimeout: a read of the insert position that does not
// return forwards the queries waiting for it after PositionTimeout
// (reason position_error), and those arriving while it hangs after theirs.
func TestPositionReadTimeout(t *testing.T) {
	release := make(chan struct{})
	defer close(release)
	hang := atomic.Bool{}
	f := newFrontEnd(t, func(c *Config) {
		c.PositionTimeout = 500 * time.Millisecond // a read on a loaded machine is well within it
		read := c.Statements[0].ReadPosition
		c.Statements[0].ReadPosition = func(ctx context.Context) (changefeed.Position, error) {
			if hang.Load() {
				<-release
			}
			return read(ctx)
		}
	})
	ctx := context.Background()
	c, err := pgx.Connect(ctx, f.front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	_, lookup := f.absentLookup(t, c)
	lookup("a") // learns the shape
	lookup("b")
	before := f.count(t, "bloomgate_pgwire_forwarded_total", "reason", ReasonPositionError)
	hang.Store(true)
	lookup("c")
	lookup("d")
	if got := f.count(t, "bloomgate_pgwire_forwarded_total", "reason", ReasonPositionError) - before; got != 2 {
		t.Errorf("forwarded for %s while the read hung: %v, want 2", ReasonPositionError, got)
	}
	if n := testutil.ToFloat64(f.srv.table()[0].local); n != 1 {
		t.Errorf("answered %v, want 1", n)
	}
}

// TestShutdownClosesIdleSessions: Shutdown ends idle sessions at once
// instead of waiting for clients that keep their connections open.
func TestShutdownClosesIdleSessions(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, f.front)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if err := c.Ping(ctx); err != nil {
		t.Fatal(err)
	}
	sctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := f.srv.Shutdown(sctx); err != nil {
		t.Fatalf("Shutdown: %v (an idle session kept it waiting)", err)
	}
	if err := c.Ping(ctx); err == nil {
		t.Error("the idle session still answers after Shutdown")
	}
	if err := f.srv.Shutdown(ctx); err != nil {
		t.Errorf("a second Shutdown: %v", err)
	}
}

// TestAnswerLater: a server started as a plain relay (its sets still
// connecting) answers locally in the sessions opened before Answer gave it
// its statements, from their next query on: a simple-protocol session at
// once (its first forwarded answer teaches the result shape), and a
// statement prepared before Answer once the shape is learned (prepared
// again, it would be described again; pgx's cache keeps it); a session
// that changed its search_path while relayed stays relay-only; Answer
// works once.
func TestAnswerLater(t *testing.T) {
	var stmts []Statement
	f := newFrontEnd(t, func(c *Config) { stmts, c.Statements = c.Statements, nil })
	ctx := context.Background()
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	connect := func(mode pgx.QueryExecMode) *pgx.Conn { return connectMode(t, f.front, mode) }
	lookup := func(c *pgx.Conn, k string) {
		t.Helper()
		if err := c.QueryRow(ctx, q, k).Scan(new(string), new(int)); err != pgx.ErrNoRows {
			t.Fatalf("%s: %v", k, err)
		}
	}
	answered := func() float64 { return f.count(t, "bloomgate_pgwire_answered_total") }
	simple := connect(pgx.QueryExecModeSimpleProtocol)
	prepared := connect(pgx.QueryExecModeCacheStatement)
	tainted := connect(pgx.QueryExecModeSimpleProtocol)
	lookup(simple, "a")
	lookup(prepared, "a")
	if _, err := tainted.Exec(ctx, "SET search_path = public"); err != nil {
		t.Fatal(err)
	}
	if n := answered() + f.count(t, "bloomgate_pgwire_forwarded_total"); n != 0 {
		t.Fatalf("a relay counted %v lookups", n)
	}
	if err := f.srv.Answer(stmts); err != nil {
		t.Fatal(err)
	}
	lookup(simple, "b") // learns the shape
	lookup(simple, "c")
	if n := answered(); n != 1 {
		t.Errorf("answered %v in a simple-protocol session opened before Answer, want 1", n)
	}
	lookup(prepared, "d")
	if n := answered(); n != 2 {
		t.Errorf("answered %v after a lookup on a statement prepared before Answer, want 2", n)
	}
	lookup(tainted, "e")
	if n := answered(); n != 2 {
		t.Errorf("answered %v after a lookup in a session that set its search_path, want 2", n)
	}
	for reason, want := range map[string]float64{ReasonNotLearned: 1, ReasonSession: 1} {
		if got := f.count(t, "bloomgate_pgwire_forwarded_total", "reason", reason); got != want {
			t.Errorf("forwarded for %s: %v, want %v", reason, got, want)
		}
	}
	if err := f.srv.Answer(stmts); !errors.Is(err, ErrAnswering) {
		t.Errorf("a second Answer: %v, want ErrAnswering", err)
	}
}

// TestShapeChangedBehindFrontEnd: a column's type changed straight on the
// database, where the front end cannot see the DDL, is learned from the
// next forwarded execution of the statement (each forwarded RowDescription
// is compared with the one learned), and local answers describe the new
// type from then on.
func TestShapeChangedBehindFrontEnd(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	c := connectMode(t, f.front, pgx.QueryExecModeExec)
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	nType := func(k string, wantRows int) uint32 {
		t.Helper()
		rows, err := c.Query(ctx, q, k)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil || n != wantRows {
			t.Fatalf("%s: %d rows, %v; want %d", k, n, err, wantRows)
		}
		return rows.FieldDescriptions()[1].DataTypeOID
	}
	local := func() float64 { return testutil.ToFloat64(f.srv.table()[0].local) }
	nType("absent-1", 0) // learns the shape
	if oid := nType("absent-2", 0); oid != 23 || local() != 1 {
		t.Fatalf("answered %v locally, n described as type %d; want 1, int4 (23)", local(), oid)
	}
	admin := f.direct(t)
	if _, err := admin.Exec(ctx, "ALTER TABLE "+f.table+" ALTER COLUMN n TYPE bigint"); err != nil {
		t.Fatal(err)
	}
	if oid := nType("k1", 1); oid != 20 { // forwarded: the key is present
		t.Fatalf("present key through the front end: n described as type %d, want int8 (20)", oid)
	}
	if oid := nType("absent-3", 0); oid != 20 || local() != 2 {
		t.Errorf("answered %v locally, n described as type %d; want 2, int8 (20)", local(), oid)
	}
}
