package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestScanPartsExact: the parts of a parallel scan deliver every key of the
// snapshot exactly once, and only those: rows inserted, deleted and updated
// (updates move rows to new blocks, across the parts' ranges) after the
// snapshot is exported but before any part starts are not seen, and the
// rows as they were are.
func TestScanPartsExact(t *testing.T) {
	// Not parallel: it sets the package's afterExport hook, which every
	// ScanParts of another test would run meanwhile.
	pool, schema := testDB(t)
	ctx := context.Background()
	table := schema + ".users"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" (id int PRIMARY KEY, email text)"); err != nil {
		t.Fatal(err)
	}
	const n = 20000 // about 130 heap blocks
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" SELECT i, 'user' || i || '@example.com' FROM generate_series(0, $1) i", n-1); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "INSERT INTO "+table+" VALUES (-1, NULL)"); err != nil { // NULLs are skipped
		t.Fatal(err)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("user%d@example.com", i))
	}
	slices.Sort(want)
	for _, parallel := range []int{1, 2, 3} {
		t.Run(fmt.Sprint("parallel=", parallel), func(t *testing.T) {
			src, err := postgres.New(postgres.Config{Pool: pool, Table: table, Column: "email", Parallel: parallel})
			if err != nil {
				t.Fatal(err)
			}
			if got := src.Parts(); got != parallel {
				t.Fatalf("Parts() = %d, want %d", got, parallel)
			}
			// Concurrent writers after the export: the scan must not see them.
			postgres.SetAfterExport(func() {
				for _, q := range []string{
					"UPDATE " + table + " SET email = 'moved-' || email WHERE id % 97 = 0",
					"DELETE FROM " + table + " WHERE id % 101 = 0",
					"INSERT INTO " + table + " SELECT i, 'late' || i || '@example.com' FROM generate_series(1000000, 1000500) i",
				} {
					if _, err := pool.Exec(ctx, q); err != nil {
						t.Error(err)
					}
				}
			})
			defer postgres.SetAfterExport(nil)
			var mu sync.Mutex
			var got []string
			seen := map[int]bool{}
			err = src.ScanParts(ctx, func(part int, key []byte) error {
				mu.Lock()
				defer mu.Unlock()
				if part < 0 || part >= parallel {
					t.Errorf("part %d of %d", part, parallel)
				}
				seen[part] = true
				got = append(got, string(key))
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(got)
			if !slices.Equal(got, want) {
				t.Fatalf("got %d keys, want %d (first got %q)", len(got), len(want), got[:min(3, len(got))])
			}
			if len(seen) != parallel {
				t.Fatalf("keys came from %d parts, want %d", len(seen), parallel)
			}
			// Undo the writes for the next round.
			if _, err := pool.Exec(ctx, "DELETE FROM "+table+" WHERE id >= 1000000"); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "UPDATE "+table+" SET email = substr(email, 7) WHERE email LIKE 'moved-%'"); err != nil {
				t.Fatal(err)
			}
			if _, err := pool.Exec(ctx, "INSERT INTO "+table+" SELECT i, 'user' || i || '@example.com' FROM generate_series(0, $1) i WHERE i % 101 = 0 ON CONFLICT DO NOTHING", n-1); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestScanPartsGate: a gate warmed from a parallel scan holds every key, and
// fn's error stops every part.
func TestScanPartsGate(t *testing.T) {
	t.Parallel() // a schema of its own on the shared server
	pool, schema := testDB(t)
	ctx := context.Background()
	table := schema + ".users"
	if _, err := pool.Exec(ctx, "CREATE TABLE "+table+" AS SELECT i AS id, 'user' || i || '@example.com' AS email FROM generate_series(0, 49999) i"); err != nil {
		t.Fatal(err)
	}
	src, err := postgres.New(postgres.Config{Pool: pool, Table: table, Column: "email", Parallel: 3})
	if err != nil {
		t.Fatal(err)
	}
	g, err := bloomgate.New(bloomgate.Config{Source: src})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if err := g.Warm(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range 50000 {
		if k := fmt.Sprintf("user%d@example.com", i); !g.MayContainString(k) {
			t.Fatalf("false negative for %s", k)
		}
	}
	if st := g.Stats(); st.Filter.Items != 50000 {
		t.Fatalf("filter holds %d items, want 50000", st.Filter.Items)
	}
	stop := fmt.Errorf("stop")
	calls := 0
	var mu sync.Mutex
	err = src.ScanParts(ctx, func(int, []byte) error {
		mu.Lock()
		defer mu.Unlock()
		calls++
		return stop
	})
	if err != stop {
		t.Fatalf("ScanParts returned %v, want fn's error", err)
	}
	if calls > 3 {
		t.Fatalf("fn called %d times after returning an error", calls)
	}
}
