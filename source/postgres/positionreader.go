package postgres

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
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

	// With Watch: the table and key column, the definition read first,
	// and the error every read returns once it differs.
	watch   [][]byte
	defn    string
	last    []byte
	changed error
}

// positionStatement is the prepared statement's name and text.
const (
	positionStatementName = "bloomgate_wal_insert_lsn"
	positionStatementSQL  = "SELECT pg_current_wal_insert_lsn()"
)

// binaryResult asks for the pg_lsn in binary: eight bytes, big-endian
// (and, with Watch, the definition in text).
var binaryResult = []int16{1, 0}

// watchStatementSQL reads the insert position and, after it in the same
// snapshot, what a set built from the table ($1) and its key column ($2)
// relies on and its change feed does not carry: the relation the name
// means, its storage (a rewrite changes it: ALTER … TYPE … USING, VACUUM
// FULL, CLUSTER, TRUNCATE), the column's number, type and collation, its
// descendants (inheritance children, partitions) and their storage, and
// how many = operators there are outside pg_catalog (one for text in a
// schema on a session's search_path, or an exact match for varchar, is
// chosen over pg_catalog's; Watch refuses those that exist at start, and
// any new one counts as a change).
const watchStatementSQL = `SELECT pg_current_wal_insert_lsn(), (
SELECT concat_ws(' ', 'relation', c.oid, c.relkind, c.relfilenode,
  'column', a.attnum, a.atttypid, a.atttypmod, a.attcollation,
  'descendants', CASE WHEN c.relhassubclass THEN (WITH RECURSIVE t(oid) AS (
      SELECT inhrelid FROM pg_inherits WHERE inhparent = c.oid
      UNION SELECT i.inhrelid FROM pg_inherits i JOIN t ON i.inhparent = t.oid)
    SELECT count(*) || ':' || coalesce(string_agg(t.oid || '/' || k.relkind::text || '/' || k.relfilenode, ',' ORDER BY t.oid), '')
    FROM t JOIN pg_class k ON k.oid = t.oid) ELSE '0:' END,
  'operators', (SELECT count(*) FROM pg_operator WHERE oprname = '=' AND oprnamespace <> 11)) -- 11: pg_catalog
FROM pg_class c LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped
WHERE c.oid = to_regclass($1))`

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
	sql := positionStatementSQL
	if r.watch != nil {
		sql = watchStatementSQL
	}
	sd, err := conn.Prepare(ctx, positionStatementName, sql, nil)
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
	if r.changed != nil {
		return 0, r.changed
	}
	if r.conn == nil {
		if err := r.connectLocked(ctx); err != nil {
			return 0, err
		}
	}
	pos, err := r.readLocked(ctx)
	if err == nil && r.watch != nil && string(r.last) != r.defn {
		r.changed = fmt.Errorf("%w: %s (%s → %s)", changefeed.ErrTableChanged, r.watch[0], r.defn, r.last)
		return 0, r.changed
	}
	if err != nil {
		closeConn(r.conn)
		r.conn, r.stmt = nil, nil
		return 0, fmt.Errorf("postgres: reading the WAL insert position: %w", err)
	}
	return pos, nil
}

// Watch makes every later Read also check that table (as the reader's
// connection resolves the name) and its key column are defined as now, and
// fail with an error wrapping changefeed.ErrTableChanged from the first
// read that finds otherwise on. It fails when the table cannot be
// answered for at all: it has inheritance children (a query of it reads
// their rows, which its feed does not carry), or an = operator outside
// pg_catalog takes text, varchar, char, name or a pseudo-type.
func (r *PositionReader) Watch(ctx context.Context, table, column string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.conn != nil {
		closeConn(r.conn)
		r.conn, r.stmt = nil, nil
	}
	r.watch = [][]byte{[]byte(table), []byte(column)}
	// One plan for every read: with custom plans (the default for a
	// statement with parameters) each read was planned again, 0.5 ms.
	if r.cfg.RuntimeParams == nil {
		r.cfg.RuntimeParams = map[string]string{}
	}
	r.cfg.RuntimeParams["plan_cache_mode"] = "force_generic_plan"
	if err := r.connectLocked(ctx); err != nil {
		return err
	}
	if _, err := r.readLocked(ctx); err != nil {
		return fmt.Errorf("postgres: reading %s's definition: %w", table, err)
	}
	defn := string(r.last)
	f := strings.Fields(defn)
	if len(f) != 13 || f[0] != "relation" || f[4] != "column" || f[9] != "descendants" || f[11] != "operators" {
		return fmt.Errorf("postgres: %s: no such table or column %q (%q)", table, column, defn)
	}
	if f[2] == "r" && !strings.HasPrefix(f[10], "0:") {
		return fmt.Errorf("postgres: %s has inheritance children: a query of it reads their rows too, which its change feed does not carry (answer from a table without children)", table)
	}
	var textOps int
	rr := r.conn.ExecParams(ctx, textOperatorsSQL, nil, nil, nil, nil)
	for rr.NextRow() {
		textOps, _ = strconv.Atoi(string(rr.Values()[0]))
	}
	if _, err := rr.Close(); err != nil {
		return fmt.Errorf("postgres: reading the = operators: %w", err)
	}
	if textOps != 0 {
		return fmt.Errorf("postgres: %d operator(s) named = outside pg_catalog take text, varchar, char, name or a pseudo-type: such an operator can be chosen over PostgreSQL's own for the key's comparison (drop it, or do not answer statements locally)", textOps)
	}
	r.defn = defn
	return nil
}

// readLocked reads the position and, with Watch, the definition into r.last.
// textOperatorsSQL counts the = operators outside pg_catalog that can take
// text on either side (25, 1043, 1042, 19: text, varchar, char, name; or a
// pseudo-type such as anyelement).
const textOperatorsSQL = `SELECT count(*) FROM pg_operator o
JOIN pg_type l ON l.oid = o.oprleft JOIN pg_type r ON r.oid = o.oprright
WHERE o.oprname = '=' AND o.oprnamespace <> 11
AND (l.typtype = 'p' OR r.typtype = 'p' OR o.oprleft IN (25, 1043, 1042, 19) OR o.oprright IN (25, 1043, 1042, 19))`

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
	cols := 1 + min(len(r.watch), 1)
	rr := r.conn.ExecStatement(ctx, r.stmt, r.watch, nil, binaryResult[:cols])
	var pos changefeed.Position
	rows := 0
	for rr.NextRow() {
		v := rr.Values()
		if rows++; len(v) != cols || len(v[0]) != 8 {
			rr.Close()
			return 0, fmt.Errorf("%w: unexpected result of %s", changefeed.ErrBadPosition, positionStatementSQL)
		}
		pos = changefeed.Position(binary.BigEndian.Uint64(v[0]))
		if cols == 2 {
			r.last = append(r.last[:0], v[1]...) // empty when the name means no relation (NULL)
		}
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
