// Command warm times a gate's warm-up from a PostgreSQL table beside the
// bare COPY of the same column, in one run: bare single-stream COPY into
// io.Discard, the parallel COPY (the same block ranges under one exported
// snapshot as source/postgres.Source.ScanParts) into io.Discard, and
// Gate.Warm over the parallel and the single-stream Source. Make the table
// with bench/scripts/mktable.sh and drop it afterwards.
//
//	go run ./cmd/warm -table warm_1764583200_4242.users -rounds 3
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/source/postgres"
)

func main() {
	url := flag.String("url", "postgres://postgres@127.0.0.1:5432/postgres", "PostgreSQL URL")
	table := flag.String("table", "", "schema.table to read (required)")
	column := flag.String("column", "email", "key column")
	parts := flag.Int("parallel", runtime.GOMAXPROCS(0), "COPY streams")
	rounds := flag.Int("rounds", 3, "rounds (each runs every variant once, interleaved)")
	flag.Parse()
	if *table == "" {
		flag.Usage()
		os.Exit(2)
	}
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(*url)
	if err != nil {
		log.Fatal(err)
	}
	cfg.MaxConns = int32(*parts + 1)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close()
	var rows int64
	if err := pool.QueryRow(ctx, "SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass($1)", *table).Scan(&rows); err != nil {
		log.Fatal(err)
	}
	ident := pgx.Identifier(strings.SplitN(*table, ".", 2)).Sanitize()
	sel := "SELECT " + pgx.Identifier{*column}.Sanitize() + " FROM " + ident
	variants := []struct {
		name string
		run  func() error
	}{
		{"copy-discard", func() error { return copyDiscard(ctx, pool, "COPY ("+sel+") TO STDOUT") }},
		{fmt.Sprintf("copy-discard-parallel=%d", *parts), func() error { return copyDiscardParallel(ctx, pool, ident, sel, *parts) }},
		{fmt.Sprintf("gate-warm-parallel=%d", *parts), func() error { return warm(ctx, pool, *table, *column, *parts) }},
		{"gate-warm-parallel=1", func() error { return warm(ctx, pool, *table, *column, 1) }},
	}
	fmt.Printf("table %s, %d rows (reltuples), GOMAXPROCS %d\n", *table, rows, runtime.GOMAXPROCS(0))
	for r := range *rounds {
		for _, v := range variants {
			runtime.GC()
			start := time.Now()
			if err := v.run(); err != nil {
				log.Fatalf("%s: %v", v.name, err)
			}
			d := time.Since(start)
			fmt.Printf("round %d  %-28s %7.2f s  %6.2f Mrows/s\n", r+1, v.name, d.Seconds(), float64(rows)/d.Seconds()/1e6)
		}
	}
}

func copyDiscard(ctx context.Context, pool *pgxpool.Pool, sql string) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	_, err = conn.Conn().PgConn().CopyTo(ctx, io.Discard, sql)
	return err
}

// copyDiscardParallel runs the block-range COPYs of ScanParts, under one
// exported snapshot, into io.Discard.
func copyDiscardParallel(ctx context.Context, pool *pgxpool.Pool, ident, sel string, parts int) error {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	var snap string
	var blocks int64
	if err := tx.QueryRow(ctx, "SELECT pg_export_snapshot(), pg_relation_size($1::regclass) / current_setting('block_size')::bigint", ident).Scan(&snap, &blocks); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, parts)
	for p := range parts {
		lo, hi := blocks*int64(p)/int64(parts), blocks*int64(p+1)/int64(parts)
		where := fmt.Sprintf(" WHERE ctid >= '(%d,0)'::tid", lo)
		if p < parts-1 {
			where += fmt.Sprintf(" AND ctid < '(%d,0)'::tid", hi)
		}
		wg.Go(func() {
			c, err := pool.Acquire(ctx)
			if err != nil {
				errs[p] = err
				return
			}
			defer c.Release()
			t, err := c.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				errs[p] = err
				return
			}
			defer t.Rollback(ctx)
			if _, err := t.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+snap+"'"); err != nil {
				errs[p] = err
				return
			}
			_, errs[p] = t.Conn().PgConn().CopyTo(ctx, io.Discard, "COPY ("+sel+where+") TO STDOUT")
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return tx.Commit(ctx)
}

func warm(ctx context.Context, pool *pgxpool.Pool, table, column string, parts int) error {
	src, err := postgres.New(postgres.Config{Pool: pool, Table: table, Column: column, Parallel: parts})
	if err != nil {
		return err
	}
	g, err := bloomgate.New(bloomgate.Config{Source: src, FPRate: 0.001})
	if err != nil {
		return err
	}
	defer g.Close()
	return g.Warm(ctx)
}
