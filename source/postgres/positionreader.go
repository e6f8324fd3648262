package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/changefeed"
)

// PositionReader reads the database's WAL insert position (WritePosition's
// pg_current_wal_insert_lsn()) again and again on a connection of its own,
// for a caller that reads it for every few queries it serves (the
// PostgreSQL front end): the statement is prepared once, its result read
// in binary, and a read with a context that is never done (Background)
// is bounded by the connection's deadline instead of a context, so that
// it allocates almost nothing. A read that fails closes the connection;
// the next read dials again. It is safe for concurrent use; reads are
// serialised.
type PositionReader struct {
	cfg     *pgconn.Config
	timeout time.Duration

	mu     sync.Mutex
	conn   *pgconn.PgConn
	stmt   *pgconn.StatementDescription
	closed bool
}

// positionStatement is the prepared statement's name and text.
const (
	positionStatementName = "bloomgate_wal_insert_lsn"
	positionStatementSQL  = "SELECT pg_current_wal_insert_lsn()"
)

// binaryResult asks for the pg_lsn in binary: eight bytes, big-endian.
var binaryResult = []int16{1}

// ErrReaderClosed is returned by PositionReader.Read after Close.
var ErrReaderClosed = errors.New("postgres: position reader closed")

// NewPositionReader connects to the database of connString and prepares
// the read; each read (dialling again included) is bounded by timeout
// (0: DefaultTimeout).
func NewPositionReader(ctx context.Context, connString string, timeout time.Duration) (*PositionReader, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, fmt.Errorf("postgres: position reader: %w", err)
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if cfg.ConnectTimeout == 0 || cfg.ConnectTimeout > timeout {
		cfg.ConnectTimeout = timeout
	}
	r := &PositionReader{cfg: cfg, timeout: timeout}
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.connectLocked(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

func (r *PositionReader) connectLocked(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, r.timeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(ctx, r.cfg)
	if err != nil {
		return fmt.Errorf("postgres: position reader: %w", err)
	}
	sd, err := conn.Prepare(ctx, positionStatementName, positionStatementSQL, nil)
	if err != nil {
		closeConn(conn)
		return fmt.Errorf("postgres: position reader: %w", err)
	}
	r.conn, r.stmt = conn, sd
	return nil
}

// Read returns the WAL insert position, read after the call started.
func (r *PositionReader) Read(ctx context.Context) (changefeed.Position, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrReaderClosed
	}
	if r.conn == nil {
		if err := r.connectLocked(ctx); err != nil {
			return 0, err
		}
	}
	pos, err := r.readLocked(ctx)
	if err != nil {
		closeConn(r.conn)
		r.conn, r.stmt = nil, nil
		return 0, fmt.Errorf("postgres: reading the WAL insert position: %w", err)
	}
	return pos, nil
}

func (r *PositionReader) readLocked(ctx context.Context) (changefeed.Position, error) {
	if ctx.Done() == nil {
		// pgconn watches a context other than Background, at a few
		// allocations a read: this one's bound is the connection's
		// deadline.
		ctx = context.Background()
	}
	nc := r.conn.Conn()
	if err := nc.SetDeadline(time.Now().Add(r.timeout)); err != nil {
		return 0, err
	}
	rr := r.conn.ExecStatement(ctx, r.stmt, nil, nil, binaryResult)
	var pos changefeed.Position
	rows := 0
	for rr.NextRow() {
		v := rr.Values()
		if rows++; len(v) != 1 || len(v[0]) != 8 {
			rr.Close()
			return 0, fmt.Errorf("%w: unexpected result of %s", changefeed.ErrBadPosition, positionStatementSQL)
		}
		pos = changefeed.Position(binary.BigEndian.Uint64(v[0]))
	}
	if _, err := rr.Close(); err != nil {
		return 0, err
	}
	if rows != 1 {
		return 0, fmt.Errorf("%w: %d rows from %s", changefeed.ErrBadPosition, rows, positionStatementSQL)
	}
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return 0, err
	}
	return pos, nil
}

// Close closes the connection; Read fails after it. It may be called more
// than once.
func (r *PositionReader) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	if r.conn != nil {
		closeConn(r.conn)
		r.conn, r.stmt = nil, nil
	}
	return nil
}
