package postgres

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
)

// Parallel scans.
//
// One COPY stream is bound by one backend's CPU (PostgreSQL reads, forms and
// sends each row on one core) and by the one goroutine that decodes and
// hashes its rows. ScanParts splits the table into ranges of heap blocks
// (ctid >= '(lo,0)' AND ctid < '(hi,0)', a TID range scan since
// PostgreSQL 14) and copies each range on a connection of its own, every
// connection inside a REPEATABLE READ transaction that imported one
// exported snapshot (pg_export_snapshot, SET TRANSACTION SNAPSHOT). Every
// row version the snapshot sees lies in exactly one block, and every such
// block lies below the relation's size read after the snapshot was taken
// (the last range has no upper bound anyway), so the parts together hold
// each key the snapshot sees exactly once: the keys a single COPY at that
// snapshot would deliver.

var _ changefeed.PartitionedSource = (*Source)(nil)

// afterExport, when set (by tests), runs once the snapshot is exported and
// before any part imports it.
var afterExport func()

// Parts returns how many COPY streams ScanParts runs at once: Config.Parallel,
// at most the pool's MaxConns minus one (the connection that holds the
// exported snapshot), at least 1.
func (s *Source) Parts() int {
	n := s.cfg.Parallel
	if n == 0 {
		n = runtime.GOMAXPROCS(0)
	}
	return max(1, min(n, int(s.cfg.Pool.Config().MaxConns)-1))
}

// ScanParts streams the keys like Scan, as up to Parts() COPY streams at
// once, each decoded on a goroutine of its own: fn is called concurrently
// for different parts, one call at a time per part, with part in
// [0, Parts()). Together the parts deliver every non-NULL key of one
// snapshot exactly once. A Source over Query, a view, a partitioned table or
// a server before PostgreSQL 14 scans as one part.
func (s *Source) ScanParts(ctx context.Context, fn func(part int, key []byte) error) error {
	parts := s.Parts()
	if parts < 2 || s.cfg.Query != "" {
		return s.Scan(ctx, func(k []byte) error { return fn(0, k) })
	}
	conn, err := s.cfg.Pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("postgres: scan: %w", err)
	}
	defer conn.Release()
	// The exporting transaction stays open until every part has finished:
	// a part may import the snapshot only while it does.
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("postgres: scan: %w", err)
	}
	defer tx.Rollback(context.Background())
	var snapshot string
	if err := tx.QueryRow(ctx, "SELECT pg_export_snapshot()").Scan(&snapshot); err != nil {
		return fmt.Errorf("postgres: scan: export snapshot: %w", err)
	}
	if afterExport != nil {
		afterExport()
	}
	if err := copyParts(ctx, s.cfg.Pool, snapshot, s.table, s.cfg.Column, parts, fn); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// copyParts copies column of table (sanitised) at the exported snapshot in
// up to parts block ranges at once, each on a connection of its own that
// imported the snapshot, calling fn(part, key) for every non-NULL key. The
// first part's connection reads the table's kind and size; a table whose
// heap cannot be split (not an ordinary table or materialised view, a
// server before PostgreSQL 14, fewer blocks than parts) is copied whole by
// it. The snapshot must stay exported until copyParts returns.
func copyParts(ctx context.Context, pool *pgxpool.Pool, snapshot, table, column string, parts int, fn func(part int, key []byte) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	first, err := importSnapshot(ctx, pool, snapshot)
	if err != nil {
		return err
	}
	defer first.close()
	var kind string
	var blocks, version int64
	err = first.tx.QueryRow(ctx, `SELECT c.relkind::text, pg_relation_size(c.oid) / current_setting('block_size')::bigint,
		current_setting('server_version_num')::bigint FROM pg_class c WHERE c.oid = to_regclass($1)`, table).Scan(&kind, &blocks, &version)
	if err != nil {
		return fmt.Errorf("postgres: scan: table size: %w", err)
	}
	if (kind != "r" && kind != "m") || version < 140000 || blocks < int64(parts) {
		parts = 1
	}
	sel := "SELECT " + pgxIdent(column) + " FROM " + table
	if parts == 1 {
		if err := copyKeys(ctx, first.tx.Conn().PgConn(), "COPY ("+sel+") TO STDOUT", func(k []byte) error { return fn(0, k) }); err != nil {
			return err
		}
		return first.tx.Commit(ctx)
	}
	var wg sync.WaitGroup
	errs := make([]error, parts)
	for p := range parts {
		lo, hi := blocks*int64(p)/int64(parts), blocks*int64(p+1)/int64(parts)
		where := fmt.Sprintf(" WHERE ctid >= '(%d,0)'::tid", lo)
		if p < parts-1 {
			where += fmt.Sprintf(" AND ctid < '(%d,0)'::tid", hi)
		}
		sql := "COPY (" + sel + where + ") TO STDOUT"
		wg.Go(func() {
			part := first
			if p > 0 {
				var err error
				if part, err = importSnapshot(ctx, pool, snapshot); err != nil {
					errs[p] = err
					cancel()
					return
				}
				defer part.close()
			}
			err := copyKeys(ctx, part.tx.Conn().PgConn(), sql, func(k []byte) error { return fn(p, k) })
			if err == nil {
				err = part.tx.Commit(ctx)
			}
			if err != nil {
				errs[p] = err
				cancel()
			}
		})
	}
	wg.Wait()
	return firstError(errs)
}

// firstError returns the first error that is not a cancellation caused by
// another part's failure, else the first error.
func firstError(errs []error) error {
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		if !errors.Is(err, context.Canceled) {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// snapshotTx is a REPEATABLE READ transaction that imported a snapshot.
type snapshotTx struct {
	conn *pgxpool.Conn
	tx   pgx.Tx
}

func importSnapshot(ctx context.Context, pool *pgxpool.Pool, snapshot string) (*snapshotTx, error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return nil, fmt.Errorf("postgres: scan: %w", err)
	}
	tx, err := conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		conn.Release()
		return nil, fmt.Errorf("postgres: scan: %w", err)
	}
	if _, err := tx.Exec(ctx, "SET TRANSACTION SNAPSHOT '"+strings.ReplaceAll(snapshot, "'", "''")+"'"); err != nil {
		tx.Rollback(context.Background())
		conn.Release()
		return nil, fmt.Errorf("postgres: scan: import snapshot: %w", err)
	}
	return &snapshotTx{conn, tx}, nil
}

func (s *snapshotTx) close() {
	s.tx.Rollback(context.Background()) // after Commit: a no-op
	s.conn.Release()
}

func pgxIdent(column string) string { return pgx.Identifier{column}.Sanitize() }

// copySnapshotKeys copies column of table at an exported snapshot (a
// replication slot's, say) in up to parts block ranges at once, and calls fn
// for every non-NULL key, one call at a time: the parts are decoded
// concurrently and handed to fn in batches. It delivers exactly the keys a
// single COPY in a transaction that imported the snapshot would. The
// snapshot must stay exported until it returns.
func copySnapshotKeys(ctx context.Context, pool *pgxpool.Pool, snapshot, table, column string, parts int, fn func(key []byte) error) error {
	var mu sync.Mutex
	type batch struct {
		buf  []byte
		ends []int
	}
	batches := make([]batch, parts)
	flush := func(b *batch) error {
		mu.Lock()
		defer mu.Unlock()
		start := 0
		for _, end := range b.ends {
			if err := fn(b.buf[start:end]); err != nil {
				return err
			}
			start = end
		}
		b.buf, b.ends = b.buf[:0], b.ends[:0]
		return nil
	}
	// A part stops at its first error; copyParts returns it.
	err := copyParts(ctx, pool, snapshot, table, column, parts, func(p int, key []byte) error {
		b := &batches[p]
		b.buf = append(b.buf, key...)
		b.ends = append(b.ends, len(b.buf))
		if len(b.ends) == 1024 {
			return flush(b)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for p := range batches {
		if err := flush(&batches[p]); err != nil {
			return err
		}
	}
	return nil
}

// bootstrapParts is how many COPY streams Feed.Bootstrap runs under the
// slot's exported snapshot: GOMAXPROCS, at most the pool's MaxConns (the
// replication connection that holds the snapshot is not the pool's).
func (f *Feed) bootstrapParts() int {
	return max(1, min(runtime.GOMAXPROCS(0), int(f.pool.Config().MaxConns)))
}
