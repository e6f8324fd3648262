package serve_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"github.com/bloomgate/bloomgate/internal/demo"
	"github.com/bloomgate/bloomgate/internal/memfeed"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

func email(i int) string { return fmt.Sprintf("user%d@example.com", i) }

// waitReady waits until every set is ready, and fails with their states
// after a minute.
func waitReady(t *testing.T, s *serve.Store) {
	t.Helper()
	testsvc.Eventually(t, time.Minute, s.Ready, "sets never became ready: %v", setStates{s})
}

// setStates prints each set's state when formatted (at the deadline).
type setStates struct{ s *serve.Store }

func (ss setStates) String() string {
	var b strings.Builder
	for _, set := range ss.s.Sets() {
		st := set.Stats()
		fmt.Fprintf(&b, "[%s: %v %s] ", set.Name(), st.State, st.Reason)
	}
	return b.String()
}

// exerciseSet checks a ready users set holding email(0..999) with a confirm
// query.
func exerciseSet(t *testing.T, s *serve.Store, insert func(string) error) {
	t.Helper()
	ctx := context.Background()
	for i := range 1000 {
		if !held(s.MayContain("users", [][]byte{[]byte(email(i))}))[0] {
			t.Fatalf("false negative for %s", email(i))
		}
	}
	for _, tt := range []struct {
		key  string
		want bool
	}{{email(7), true}, {"nobody@example.com", false}, {"  USER8@example.com ", true}} {
		got, err := s.Has(ctx, "users", tt.key)
		if err != nil || got != tt.want {
			t.Errorf("Has(%q) = %v, %v; want %v", tt.key, got, err, tt.want)
		}
	}
	// Count false positives observed through the confirm path.
	for i := range 2000 {
		if ok, err := s.Has(ctx, "users", fmt.Sprintf("absent%d@example.com", i)); ok || err != nil {
			t.Fatalf("absent key reported present: %v, %v", ok, err)
		}
	}
	// Rebuild-only: the filter cannot know of rows written since its
	// build, so every BG.EXISTS asked the confirm query.
	if set := s.Set("users"); set.Mode() != serve.ModeRebuild || set.Confirms() < 2003 {
		t.Errorf("mode %v, %d confirms after 2003 BG.EXISTS, want every one confirmed", set.Mode(), set.Confirms())
	}
	// A row written by another writer (not through BF.ADD) is found by
	// BG.EXISTS at once: the filter does not have it, the database does.
	if err := insert("direct@example.com"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Has(ctx, "users", "direct@example.com"); !ok || err != nil {
		t.Errorf("Has of a row inserted by plain SQL = %v, %v; want true", ok, err)
	}
	if _, err := s.MayContainAt("users", []byte("x"), 1); !errors.Is(err, serve.ErrNoPosition) {
		t.Errorf("MayContainAt on a rebuild-only set: %v, want ErrNoPosition", err)
	}
	// The signup flow: add before the row commits, then the row exists.
	if _, _, err := s.Add("users", [][]byte{[]byte("new@example.com")}, serve.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := insert("new@example.com"); err != nil {
		t.Fatal(err)
	}
	if ok, err := s.Has(ctx, "users", "new@example.com"); !ok || err != nil {
		t.Errorf("Has after signup = %v, %v", ok, err)
	}
	if _, err := s.Delete([]string{"users"}); !errors.Is(err, serve.ErrSetReadOnly) {
		t.Errorf("DEL of a set: %v", err)
	}
}

func TestSetSQLite(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	users := demo.SQLiteUsers{DB: db, Table: "users"}
	ctx := context.Background()
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := users.Load(ctx, 1000, email); err != nil {
		t.Fatal(err)
	}
	s, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{
		Name: "users", Source: users.Source(), Normalizer: bloomgate.LowerTrim,
		Confirm: sqlite.Confirm{DB: db, Query: "SELECT 1 FROM users WHERE email = lower(trim(?))"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	waitReady(t, s)
	exerciseSet(t, s, func(e string) error { _, err := users.Insert(ctx, e); return err })
}

func TestSetPostgres(t *testing.T) {
	users, schema := testDB(t)
	pool := users.Pool
	ctx := context.Background()
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := users.Load(ctx, 1000, email); err != nil {
		t.Fatal(err)
	}
	for _, fam := range []*filter.Family{filter.FamilyBloom, filter.FamilyCuckoo} {
		kind := fam.Name
		t.Run(kind, func(t *testing.T) {
			s, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{
				Name: "users", Source: users.Source(), Normalizer: bloomgate.LowerTrim, Family: fam,
				Confirm: postgres.Confirm{Pool: pool, Query: "SELECT 1 FROM " + schema + ".users WHERE email = lower(trim($1))"},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			waitReady(t, s)
			exerciseSet(t, s, func(e string) error {
				if kind == "cuckoo" {
					return nil // inserted by the bloom run
				}
				_, err := users.Insert(ctx, e)
				return err
			})
			if kind == "cuckoo" {
				// Right after a build the gate defers removes (its snapshot
				// may not hold the row): CF.DEL answers 0 and the key stays
				// "maybe present", never a false negative.
				if ok, _ := s.Remove("users", []byte("new@example.com")); ok {
					t.Error("CF.DEL applied a remove within RebuildOverlap of the build")
				}
				if r := held(s.MayContain("users", [][]byte{[]byte("new@example.com")})); !r[0] {
					t.Error("a key whose remove was deferred is reported absent")
				}
			}
		})
	}
}

// TestSetNotReadyFailsOpen: a set whose table cannot be read answers
// "maybe" for every key: never a false negative.
func TestSetNotReadyFailsOpen(t *testing.T) {
	users, schema := testDB(t)
	src, err := postgres.New(postgres.Config{Pool: users.Pool, Query: "SELECT email FROM " + schema + ".missing_table"})
	if err != nil {
		t.Fatal(err)
	}
	s, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{Name: "users", Source: src}}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, ok := range held(s.MayContain("users", [][]byte{[]byte("a"), []byte("b")})) {
		if !ok {
			t.Fatal("a set that is not ready answered 0")
		}
	}
	if s.Ready() {
		t.Error("store ready with a set that cannot build")
	}
}

// testDB gives the test a users table in a schema of its own on the shared
// PostgreSQL (testsvc.Postgres), dropped afterwards.
func testDB(t *testing.T) (demo.PostgresUsers, string) {
	t.Helper()
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, testsvc.Postgres(t))
	if err == nil {
		err = pool.Ping(ctx)
	}
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	rand.Read(b[:])
	schema := "bg_serve_" + hex.EncodeToString(b[:])
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		pool.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE")
		pool.Close()
	})
	return demo.PostgresUsers{Pool: pool, Table: schema + ".users"}, schema
}

// held is MayContain's answers, for tests that know the key's kind.
func held(b []bool, _ serve.Kind) []bool { return b }

// expiringHeld is MayContain's answers for a name that must be an expiring
// key or missing: a key of another kind is ErrWrongType, which front ends
// answer for lookups on expiring keys.
func expiringHeld(b []bool, k serve.Kind) ([]bool, error) {
	if k != serve.KindExpiring && k != serve.KindNone {
		return nil, serve.ErrWrongType
	}
	return b, nil
}

// TestSetFamilies: a set's filter is any family of the registry a gate can
// use: its gate builds that family (a cuckoo filter for FamilyCuckoo, which
// grows past its capacity instead of refusing keys); a family whose adds take
// an expiry is refused with its name.
func TestSetFamilies(t *testing.T) {
	for _, fam := range filter.Families() {
		t.Run(fam.Name, func(t *testing.T) {
			s, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{
				Name: "users", Source: memfeed.NewSource("a@example.com", "b@example.com"), Family: fam, Capacity: 100,
			}}})
			if fam.New == nil {
				if err == nil || !strings.Contains(err.Error(), fam.Name) {
					s.Close()
					t.Fatalf("Open with family %s: %v, want an error naming it", fam.Name, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			waitReady(t, s)
			set := s.Set("users")
			if set.Family() != fam || set.Stats().Filter.Kind != fam.Kind {
				t.Fatalf("Family() %v, filter %v; want %v", set.Family(), set.Stats().Filter.Kind, fam)
			}
			if fam == filter.FamilyCuckoo {
				// More keys than the capacity: a set's cuckoo filter grows.
				for i := range 1000 {
					if _, stop, err := s.Add("users", [][]byte{fmt.Appendf(nil, "k%d", i)}, serve.AddOptions{}); err != nil || stop != nil {
						t.Fatalf("add %d: %v, %v", i, stop, err)
					}
				}
				if !set.Ready() {
					t.Fatalf("cuckoo set not ready after growing: %+v", set.Status())
				}
			}
		})
	}
}
