package postgres_test

import (
	"context"
	"io"
	"os"
	"strconv"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/demo"
)

// BenchmarkWarm compares a gate's warm-up from PostgreSQL with the bare
// COPY ... TO STDOUT into io.Discard on the same table, in the same run: the
// filter must not be the bottleneck. Rows: BLOOMGATE_BENCH_ROWS (default 1 M).
//
//	BLOOMGATE_BENCH_ROWS=10000000 go test ./source/postgres -run XXX -bench Warm -benchtime 3x -count 3
func BenchmarkWarm(b *testing.B) {
	rows := 1_000_000
	if s := os.Getenv("BLOOMGATE_BENCH_ROWS"); s != "" {
		var err error
		if rows, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	pool, schema := testDB(b)
	ctx := context.Background()
	users := demo.PostgresUsers{Pool: pool, Table: schema + ".users"}
	if err := users.Create(ctx); err != nil {
		b.Fatal(err)
	}
	if err := users.Load(ctx, rows, emails("user", rows)); err != nil {
		b.Fatal(err)
	}
	query := `COPY (SELECT "email" FROM "` + schema + `"."users") TO STDOUT`
	report := func(b *testing.B) {
		b.ReportMetric(float64(rows)*float64(b.N)/b.Elapsed().Seconds()/1e6, "Mkeys/s")
	}
	b.Run("copy-discard", func(b *testing.B) {
		for b.Loop() {
			conn, err := pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if _, err := conn.Conn().PgConn().CopyTo(ctx, io.Discard, query); err != nil {
				b.Fatal(err)
			}
			conn.Release()
		}
		report(b)
	})
	b.Run("scan-only", func(b *testing.B) {
		src := users.Source()
		for b.Loop() {
			if err := src.Scan(ctx, func([]byte) error { return nil }); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
	b.Run("gate-warm", func(b *testing.B) {
		for b.Loop() {
			g, err := bloomgate.New(bloomgate.Config{Source: users.Source(), FPRate: 0.001})
			if err != nil {
				b.Fatal(err)
			}
			if err := g.Warm(ctx); err != nil {
				b.Fatal(err)
			}
		}
		report(b)
	})
}
