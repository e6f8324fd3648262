package postgres

import (
	"context"
	"fmt"
	"strconv"
	"strings"

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

// LSN is PostgreSQL's notation for positions: a log sequence number as
// pg_current_wal_insert_lsn() prints it, two hexadecimal halves,
// "16/B374D848" (FormatLSN, ParseLSN).
var LSN changefeed.Notation = lsnNotation{}

type lsnNotation struct{}

func (lsnNotation) Format(p changefeed.Position) string         { return FormatLSN(p) }
func (lsnNotation) Parse(s string) (changefeed.Position, error) { return ParseLSN(s) }
func (lsnNotation) String() string                              { return "an LSN such as 16/B374D848" }

// FormatLSN formats p as PostgreSQL formats an LSN: "16/B374D848".
func FormatLSN(p changefeed.Position) string {
	return fmt.Sprintf("%X/%X", uint32(p>>32), uint32(p))
}

// ParseLSN parses an LSN as PostgreSQL prints it ("16/B374D848"; either
// case). Its errors wrap changefeed.ErrBadPosition.
func ParseLSN(s string) (changefeed.Position, error) {
	hi, lo, ok := strings.Cut(s, "/")
	if !ok {
		return 0, fmt.Errorf("%w: %q is not an LSN", changefeed.ErrBadPosition, s)
	}
	h, err1 := strconv.ParseUint(hi, 16, 32)
	l, err2 := strconv.ParseUint(lo, 16, 32)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("%w: %q is not an LSN", changefeed.ErrBadPosition, s)
	}
	return changefeed.Position(h<<32 | l), nil
}
