package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestSizedFromWhatIsRead: a table filled after its statistics were taken
// — never analysed (reltuples -1), or analysed at a thousandth of its rows
// — sizes a following gate's first filter and a rebuild-only gate's
// filter from the rows actually read: each turns ready with a capacity at
// or above the rows and a measured false-positive rate within the target.
// Before, the follower took the estimate (none: the 65,536 floor) and
// turned ready with 100,000 keys in it, at about 5× the target.
func TestSizedFromWhatIsRead(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	const rows, fpRate = 100_000, 0.01
	for _, tc := range []struct {
		name    string
		analyse int // rows in the table when it is analysed; 0: never
		follow  bool
	}{
		{"follow/never-analysed", 0, true},
		{"follow/stale-statistics", 100, true},
		{"rebuild-only/stale-statistics", 100, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newFeedFixture(t, "")
			fx.exec(t, "ALTER TABLE "+fx.table+" SET (autovacuum_enabled = off)")
			fill := func(from, to int) {
				fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'k'||g||'@example.com' FROM generate_series($1::int, $2::int) g", from, to-1)
			}
			if tc.analyse > 0 {
				fill(0, tc.analyse)
				fx.exec(t, "ANALYZE "+fx.table)
			}
			fill(tc.analyse, rows)
			var reltuples float64
			if err := fx.pool.QueryRow(context.Background(), "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", fx.table).Scan(&reltuples); err != nil {
				t.Fatal(err)
			}
			if reltuples >= rows/2 {
				t.Fatalf("reltuples %v: the statistics know the table's rows; the test needs them stale", reltuples)
			}

			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg := bloomgate.Config{FPRate: fpRate}
			if !tc.follow {
				src, err := postgres.New(postgres.Config{Pool: fx.pool, Table: fx.table, Column: "email"})
				if err != nil {
					t.Fatal(err)
				}
				cfg.Source = src
			}
			g, err := bloomgate.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if tc.follow {
				fctx, fcancel := context.WithCancel(ctx)
				done := make(chan error, 1)
				go func() { done <- g.Follow(fctx, fx.feed(t), bloomgate.FollowConfig{}) }()
				defer func() {
					fcancel()
					if err := <-done; !errors.Is(err, context.Canceled) {
						t.Errorf("Follow: %v", err)
					}
				}()
				if err := g.WaitReady(ctx); err != nil {
					t.Fatal(err)
				}
			} else if err := g.Warm(ctx); err != nil {
				t.Fatal(err)
			}
			st := g.Stats().Filter
			const probes = 50_000
			fps := 0
			for i := range probes {
				if g.MayContainString(fmt.Sprintf("absent-%d@example.org", i)) {
					fps++
				}
			}
			rate := float64(fps) / probes
			t.Logf("reltuples %v; ready with capacity %d, items %d; FP rate %.4f over %d absent keys (target %g)",
				reltuples, st.Capacity, st.Items, rate, probes, fpRate)
			if st.Capacity < rows {
				t.Errorf("capacity %d for a table of %d rows", st.Capacity, rows)
			}
			if rate > fpRate {
				t.Errorf("false-positive rate %.4f, above the target %g", rate, fpRate)
			}
			for i := range rows {
				if k := fmt.Sprintf("k%d@example.com", i); !g.MayContainString(k) {
					t.Fatalf("false negative: %s", k)
				}
			}
		})
	}
}
