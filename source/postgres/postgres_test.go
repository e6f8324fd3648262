package postgres_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/demo"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

func TestMain(m *testing.M) {
	testsvc.DefaultParallel(4) // the parallel tests mostly wait on PostgreSQL
	testsvc.Main(m)
}

// testDB gives the test a schema of its own, dropped afterwards, on the
// shared PostgreSQL (testsvc.Postgres: the test skips without one, or fails
// in CI).
func testDB(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	return schemaOn(t, testsvc.Postgres(t))
}

func schemaOn(t testing.TB, url string) (*pgxpool.Pool, string) {
	t.Helper()
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "bg_test_" + hex.EncodeToString(b[:])
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	})
	return pool, schema
}

func collect(t *testing.T, s *postgres.Source) ([]string, error) {
	t.Helper()
	var got []string
	err := s.Scan(context.Background(), func(k []byte) error { got = append(got, string(k)); return nil })
	return got, err
}

func TestScanSpecialKeys(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	keys := []string{"plain@example.com", "tab\there", "new\nline", `back\slash`, `\N`, "", "ünïcödé ✓", "cr\r", " spaced ", strings.Repeat("long", 5000)}
	if _, err := pool.Exec(ctx, "CREATE TABLE "+schema+".k (v text)"); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := pool.Exec(ctx, "INSERT INTO "+schema+".k VALUES ($1)", k); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+schema+".k VALUES (NULL), (NULL)"); err != nil {
		t.Fatal(err)
	}
	s, err := postgres.New(postgres.Config{Pool: pool, Table: schema + ".k", Column: "v"})
	if err != nil {
		t.Fatal(err)
	}
	got, err := collect(t, s)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	want := slices.Sorted(slices.Values(keys))
	if !slices.Equal(got, want) {
		t.Fatalf("scan returned\n%q\nwant\n%q", got, want)
	}
	if n, err := s.Estimate(ctx); err != nil || n != int64(len(keys)+2) {
		t.Fatalf("Estimate = %d, %v (never analysed: falls back to count)", n, err)
	}
	// Integer keys arrive in their text form.
	s2, _ := postgres.New(postgres.Config{Pool: pool, Query: "SELECT g FROM generate_series(-2, 2) g"})
	if got, err := collect(t, s2); err != nil || strings.Join(got, ",") != "-2,-1,0,1,2" {
		t.Fatalf("integers: %q, %v", got, err)
	}
}

func TestBadQueries(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	pool.Exec(ctx, "CREATE TABLE "+schema+".t (a text, b text)")
	pool.Exec(ctx, "INSERT INTO "+schema+".t VALUES ('x', 'y')")
	for _, tc := range []struct {
		cfg  postgres.Config
		want error
	}{
		{postgres.Config{Query: "SELECT a, b FROM " + schema + ".t"}, postgres.ErrBadQuery},
		{postgres.Config{Query: "SELECT FROM " + schema + ".t"}, postgres.ErrBadQuery},
		{postgres.Config{Query: "SELEKT nonsense"}, nil},
		{postgres.Config{Table: schema + ".missing", Column: "a"}, nil},
		{postgres.Config{Table: schema + ".t", Column: "no_such_column"}, nil},
	} {
		tc.cfg.Pool = pool
		s, err := postgres.New(tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		_, err = collect(t, s)
		if err == nil || (tc.want != nil && !errors.Is(err, tc.want)) {
			t.Errorf("%+v: err %v, want %v", tc.cfg.Query+tc.cfg.Table, err, tc.want)
		}
	}
	if _, err := postgres.New(postgres.Config{Pool: pool}); err == nil {
		t.Error("New without a query or table succeeded")
	}
	if _, err := postgres.New(postgres.Config{Table: "t", Column: "a"}); err == nil {
		t.Error("New without a pool succeeded")
	}
}

func emails(prefix string, n int) func(int) string {
	return func(i int) string { return prefix + strconv.Itoa(i) + "@example.com" }
}

func TestGateOverPostgres(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	users := demo.PostgresUsers{Pool: pool, Table: schema + ".users"}
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 50_000
	if err := users.Load(ctx, n, emails("User", n)); err != nil {
		t.Fatal(err)
	}
	g, err := bloomgate.New(bloomgate.Config{Source: users.Source(), Normalizer: bloomgate.LowerTrim, FPRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if err := g.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	find := func(email string) func(context.Context) (int64, bool, error) {
		return func(ctx context.Context) (int64, bool, error) { return users.Find(ctx, email) }
	}
	for i := range n {
		e := emails("user", n)(i) // lower-cased on the lookup side
		if !g.MayContainString(e) {
			t.Fatalf("false negative for %q", e)
		}
	}
	for i := range 200 {
		e := emails("User", n)(i)
		if _, found, err := bloomgate.Lookup(ctx, g, e, find(e)); !found || err != nil {
			t.Fatalf("Lookup(%q): %v %v", e, found, err)
		}
	}
	for i := range 20_000 {
		e := emails("nobody", n)(i)
		if _, found, err := bloomgate.Lookup(ctx, g, e, find(e)); found || err != nil {
			t.Fatalf("Lookup(%q): %v %v", e, found, err)
		}
	}
	s := g.Stats()
	if s.Fetches > 200+2*uint64(0.01*20000)+50 {
		t.Fatalf("%d fetches for 200 hits and 20000 misses at 1%% FP", s.Fetches)
	}
	// A user created after warm-up: Add before commit, then visible.
	if err := g.AddString("late@example.com"); err != nil {
		t.Fatal(err)
	}
	if _, err := users.Insert(ctx, "late@example.com"); err != nil {
		t.Fatal(err)
	}
	if _, found, _ := bloomgate.Lookup(ctx, g, "late@example.com", find("late@example.com")); !found {
		t.Fatal("late user not found")
	}
	if err := g.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	if !g.MayContainString("late@example.com") {
		t.Fatal("late user lost in rebuild")
	}
}

// TestWarmConnectionKilled kills the backend mid-COPY: the warm-up fails, the
// half-built filter never answers, and a later warm-up recovers.
func TestWarmConnectionKilled(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	users := demo.PostgresUsers{Pool: pool, Table: schema + ".users"}
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 300_000
	if err := users.Load(ctx, n, emails("user", n)); err != nil {
		t.Fatal(err)
	}
	var killed atomic.Int64
	kill := true
	g, err := bloomgate.New(bloomgate.Config{Source: users.Source(), OnProgress: func(p bloomgate.Progress) {
		if kill && !p.Done && killed.Load() == 0 {
			var k int64
			err := pool.QueryRow(ctx, `SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
				WHERE query LIKE 'COPY (SELECT "email" FROM "`+schema+`"%' AND pid <> pg_backend_pid()`).Scan(&k)
			if err != nil {
				t.Error(err)
			}
			killed.Store(k)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	err = g.Warm(ctx)
	// One backend per COPY stream (Source.Parts, parallel.go).
	if k := killed.Load(); k < 1 || k > int64(users.Source().Parts()) {
		t.Fatalf("terminated %d backends, want 1 to %d (warm err %v)", k, users.Source().Parts(), err)
	}
	if err == nil {
		t.Fatal("warm-up succeeded although its connection was killed")
	}
	if st, reason := g.State(); st != bloomgate.StateDegraded {
		t.Fatalf("state %v (%s)", st, reason)
	}
	for i := range 1000 {
		if !g.MayContainString(emails("nobody", n)(i)) {
			t.Fatal("answered absent from a half-built filter")
		}
	}
	kill = false
	if err := g.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < n; i += 7 {
		if !g.MayContainString(emails("user", n)(i)) {
			t.Fatalf("false negative after recovery: %d", i)
		}
	}
}

func TestScanCancel(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, _ := testDB(t)
	s, _ := postgres.New(postgres.Config{Pool: pool, Query: "SELECT g FROM generate_series(1, 10000000) g"})
	ctx, cancel := context.WithCancel(context.Background())
	seen := 0
	err := s.Scan(ctx, func([]byte) error {
		if seen++; seen == 1000 {
			cancel()
		}
		return nil
	})
	if err == nil || seen >= 10_000_000 {
		t.Fatalf("scan not cancelled: %v after %d keys", err, seen)
	}
	// The pool is still usable.
	if err := pool.Ping(context.Background()); err != nil {
		t.Fatal(err)
	}
}
