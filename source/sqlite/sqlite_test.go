package sqlite_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/demo"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

func openTemp(t testing.TB) *demo.SQLiteUsers {
	t.Helper()
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "test.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return &demo.SQLiteUsers{DB: db, Table: "users"}
}

func TestScanSpecialKeys(t *testing.T) {
	u := openTemp(t)
	ctx := context.Background()
	keys := []string{"plain@example.com", "tab\there", "new\nline", `back\slash`, "", "ünïcödé", "bad\xffutf8", strings.Repeat("long", 5000)}
	if _, err := u.DB.Exec(`CREATE TABLE k (v)`); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := u.DB.Exec(`INSERT INTO k VALUES (?)`, k); err != nil {
			t.Fatal(err)
		}
	}
	u.DB.Exec(`INSERT INTO k VALUES (NULL), (42), (-7)`)
	s, err := sqlite.New(sqlite.Config{DB: u.DB, Table: "k", Column: "v"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := s.Scan(ctx, func(k []byte) error { got = append(got, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	want := append(slices.Clone(keys), "42", "-7")
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("got %q\nwant %q", got, want)
	}
	if n, err := s.Estimate(ctx); err != nil || n != int64(len(keys)+3) {
		t.Fatalf("Estimate %d %v", n, err)
	}
}

func TestBadQueries(t *testing.T) {
	u := openTemp(t)
	u.DB.Exec(`CREATE TABLE t (a, b)`)
	u.DB.Exec(`INSERT INTO t VALUES (1, 2)`)
	for _, q := range []string{"SELECT a, b FROM t", "SELEKT", "SELECT nope FROM t", "SELECT a FROM missing"} {
		s, err := sqlite.New(sqlite.Config{DB: u.DB, Query: q})
		if err != nil {
			t.Fatal(err)
		}
		err = s.Scan(context.Background(), func([]byte) error { return nil })
		if err == nil {
			t.Errorf("%q: no error", q)
		}
		if q == "SELECT a, b FROM t" && !errors.Is(err, sqlite.ErrBadQuery) {
			t.Errorf("%q: %v, want ErrBadQuery", q, err)
		}
	}
	if _, err := sqlite.New(sqlite.Config{DB: u.DB}); err == nil {
		t.Error("New without query or table succeeded")
	}
	stop := errors.New("stop")
	s, _ := sqlite.New(sqlite.Config{DB: u.DB, Table: "t", Column: "a"})
	if err := s.Scan(context.Background(), func([]byte) error { return stop }); !errors.Is(err, stop) {
		t.Errorf("callback error: %v", err)
	}
}

func email(i int) string { return "user" + strconv.Itoa(i) + "@example.com" }

func TestGateOverSQLite(t *testing.T) {
	u := openTemp(t)
	ctx := context.Background()
	if err := u.Create(ctx); err != nil {
		t.Fatal(err)
	}
	const n = 20_000
	if err := u.Load(ctx, n, email); err != nil {
		t.Fatal(err)
	}
	g, err := bloomgate.New(bloomgate.Config{Source: u.Source(), FPRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	find := func(e string) func(context.Context) (int64, bool, error) {
		return func(ctx context.Context) (int64, bool, error) { return u.Find(ctx, e) }
	}
	for i := range n {
		if _, found, err := bloomgate.Lookup(ctx, g, email(i), find(email(i))); !found || err != nil {
			t.Fatalf("Lookup(%q): %v %v", email(i), found, err)
		}
	}
	for i := n; i < 3*n; i++ {
		if _, found, err := bloomgate.Lookup(ctx, g, email(i), find(email(i))); found || err != nil {
			t.Fatalf("Lookup(%q): %v %v", email(i), found, err)
		}
	}
	s := g.Stats()
	if s.ObservedFPRate > 0.015 || s.Fetches != n+s.EmptyFetches {
		t.Fatalf("stats %+v", s)
	}
	// Inserts through the gate, then a rebuild.
	for i := 3 * n; i < 3*n+100; i++ {
		if err := g.AddString(email(i)); err != nil {
			t.Fatal(err)
		}
		if _, err := u.Insert(ctx, email(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := g.Rebuild(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 3 * n; i < 3*n+100; i++ {
		if !g.MayContainString(email(i)) {
			t.Fatalf("false negative for %q after rebuild", email(i))
		}
	}
}

func Example() {
	dir := exampleDir()
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "example.db"))
	if err != nil {
		panic(err)
	}
	defer db.Close()
	ctx := context.Background()
	db.ExecContext(ctx, "CREATE TABLE users (id INTEGER PRIMARY KEY, email TEXT NOT NULL UNIQUE)")
	for i := range 1000 {
		db.ExecContext(ctx, "INSERT INTO users (email) VALUES (?)", fmt.Sprintf("user%d@example.com", i))
	}
	src, err := sqlite.New(sqlite.Config{DB: db, Table: "users", Column: "email"})
	if err != nil {
		panic(err)
	}

	g, _ := bloomgate.New(bloomgate.Config{Source: src, Normalizer: bloomgate.LowerTrim})
	if err := g.Warm(ctx); err != nil {
		panic(err)
	}
	for _, e := range []string{"User7@Example.com", "nobody@example.com"} {
		id, found, err := bloomgate.Lookup(ctx, g, e, func(ctx context.Context) (int64, bool, error) {
			var id int64
			err := db.QueryRowContext(ctx, "SELECT id FROM users WHERE email = ?", strings.ToLower(e)).Scan(&id)
			if errors.Is(err, sql.ErrNoRows) {
				return 0, false, nil
			}
			return id, err == nil, err
		})
		fmt.Println(e, id, found, err)
	}
	// Output:
	// User7@Example.com 8 true <nil>
	// nobody@example.com 0 false <nil>
}
