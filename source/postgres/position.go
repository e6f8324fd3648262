package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bloomgate/bloomgate/changefeed"
)

// Querier runs a query returning one row: *pgx.Conn, *pgxpool.Pool,
// *pgxpool.Conn and pgx.Tx all are.
type Querier interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// WritePosition returns the read-your-writes token for Gate.MayContainAt
// (and BF.EXISTSAT, the HTTP ?after=): the WAL insert position,
// pg_current_wal_insert_lsn(). Call it on the writer's connection once
// COMMIT has returned, not inside the transaction.
//
// Not pg_current_wal_lsn(): under synchronous_commit = off a commit returns
// before its WAL is written, so the written position can still be below the
// commit record, and a gate that has applied that position can answer
// "absent" for the row just committed. The insert position is past the
// commit record whatever synchronous_commit is.
func WritePosition(ctx context.Context, q Querier) (changefeed.Position, error) {
	var s string
	if err := q.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&s); err != nil {
		return 0, fmt.Errorf("postgres: reading the WAL insert position: %w", err)
	}
	return parseLSN(s)
}
