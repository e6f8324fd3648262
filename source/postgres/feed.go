package postgres

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/backoff"
)

var (
	// ErrSlotLost: the replication slot is missing or was invalidated
	// (pg_replication_slots.wal_status = 'lost', e.g. past
	// max_slot_wal_keep_size). The changes it held are gone.
	ErrSlotLost = fmt.Errorf("%w: replication slot lost", changefeed.ErrRebuild)
	// ErrStalePosition: the slot has already confirmed a position beyond
	// the one the consumer wants to resume from. PostgreSQL would silently
	// skip the changes in between, so the consumer's state is unusable.
	ErrStalePosition = fmt.Errorf("%w: position older than the slot's confirmed_flush_lsn", changefeed.ErrRebuild)
	// ErrNotDelivered: Confirm was given a position the running Stream has
	// not delivered.
	ErrNotDelivered = errors.New("postgres: position not delivered yet")
	// ErrStreaming: Stream was called while another Stream of the same Feed
	// runs.
	ErrStreaming = errors.New("postgres: feed is already streaming")
	// ErrNoPublication: the publication does not exist or does not include
	// the table. `bloomgate feed setup` prints the SQL that creates it. It
	// wraps changefeed.ErrSetup.
	ErrNoPublication = fmt.Errorf("%w: publication missing or not covering the table", changefeed.ErrSetup)
	// ErrClosed: the Feed was closed.
	ErrClosed = errors.New("postgres: feed closed")
)

// FeedConfig says which table's key column to follow, and through which
// replication slot and publication.
type FeedConfig struct {
	// ConnString is a PostgreSQL connection string (URL or key=value).
	// Required. The feed adds replication=database for its replication
	// connections; the role needs the REPLICATION attribute and SELECT on
	// Table.
	ConnString string
	// Table and Column name the keys. Both required. Table is read as SQL
	// reads a name: optionally schema-qualified, unquoted parts folded to lower
	// case, double-quoted parts kept as written ("public.users", `app."Users"`);
	// an unqualified name is found on the role's search_path. Column is the
	// column's name as written.
	Table, Column string
	// ValueColumn, if set, names one more column of Table whose text form
	// each Insert change carries in changefeed.Change.Value (an expiry,
	// for a table-backed expiring set); with it every UPDATE's new side is
	// an Insert. The replication connection then runs with DateStyle ISO
	// and TimeZone UTC, so a timestamptz arrives as
	// "2026-12-01 13:00:00+00" (ParseTimestamptz). Such a feed cannot be
	// fanned out (package fanout refuses a Value).
	ValueColumn string
	// Slot is the name of the permanent logical replication slot (lower-case
	// letters, digits, underscores, at most 63). Default: DefaultName of the
	// table as the server resolves it, schema-qualified, and Column: "users"
	// and "public.users" name the same slot, bloomgate_public_users_email.
	Slot string
	// Publication is the publication to read, created by a DBA (see Setup);
	// same character rules as Slot. Default: the slot name.
	Publication string
	// StatusInterval is how often the feed sends a standby status update
	// (asking the server for a reply, which refreshes Health().CaughtUp).
	// Default 1s.
	StatusInterval time.Duration
	// Timeout bounds every connection attempt and every query the feed
	// makes (connect, slot status, WAL head, publication check), and the
	// silence of a replication connection: the feed asks the server for a
	// reply every StatusInterval, and one that sends nothing for Timeout is
	// dropped and reconnected. Errors wrap changefeed.ErrTimeout. It does not
	// bound the COPY of Bootstrap and Rebuild, nor slot creation, which waits
	// for the transactions running on the server: while that wait lasts,
	// the feed logs a warning every Timeout naming the sessions it waits
	// for. Default 10s.
	Timeout time.Duration
	// MaxBackoff caps the wait between reconnection attempts, which starts
	// at 100 ms and doubles. Default 10s.
	MaxBackoff time.Duration
	// Logger receives reconnections and their reasons. Default: discard.
	Logger *slog.Logger
}

func parseLSN(s string) (changefeed.Position, error) {
	p, err := ParseLSN(s)
	if err != nil {
		return 0, fmt.Errorf("postgres: %w", err)
	}
	return p, nil
}

// DefaultTimeout is FeedConfig.Timeout's default.
const DefaultTimeout = 10 * time.Second

// DefaultName is the default slot and publication name for a table and
// column: "bloomgate_" followed by them, lower-cased, with every other
// character an underscore, cut to 63 bytes. The feed passes the table's
// schema-qualified name as the server resolves it ("public.users").
func DefaultName(table, column string) string {
	var b strings.Builder
	b.WriteString("bloomgate_")
	for _, c := range strings.ToLower(table + "_" + column) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' {
			b.WriteRune(c)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()[:min(b.Len(), 63)]
}

func validName(s string) bool {
	if s == "" || len(s) > 63 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_') {
			return false
		}
	}
	return true
}

// withDefaults fills the defaults and validates.
func (c FeedConfig) withDefaults() (FeedConfig, error) {
	if c.ConnString == "" || c.Table == "" || c.Column == "" {
		return c, errors.New("postgres: FeedConfig needs ConnString, Table and Column")
	}
	pub := c.Publication
	if pub == "" {
		pub = c.Slot
	}
	if c.Slot != "" && !validName(c.Slot) || pub != "" && !validName(pub) {
		return c, fmt.Errorf("postgres: slot %q / publication %q: use 1-63 of a-z, 0-9, _", c.Slot, c.Publication)
	}
	if c.StatusInterval <= 0 {
		c.StatusInterval = time.Second
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	if c.MaxBackoff <= 0 {
		c.MaxBackoff = 10 * time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c, nil
}

// Feed follows one table's key column through logical replication
// (pgoutput, protocol 1, whole committed transactions only), in package
// changefeed's terms: a Txn's Commit is the transaction's CommitLSN, its End
// the TransactionEndLSN, which Confirm acknowledges; a Change's Key is the
// column's text form, the same bytes Bootstrap and Source.Scan deliver.
// Under the default replica identity every UPDATE reports an UnknownDelete,
// even one that did not touch the key: the feed cannot tell.
//
// The life of a consumer:
//
//  1. No usable state: p, err := Bootstrap(ctx, add) delivers every key
//     committed before p, exactly once.
//  2. Stream(ctx, p, apply) delivers, in WAL order, every transaction that
//     changed the table and committed after p, each once per Stream. The
//     consumer makes its state durable (with the Txn.End it reflects) and
//     only then calls Confirm(End).
//  3. After a restart, Stream(ctx, durablePosition, apply): transactions
//     with End <= durablePosition are not delivered again; those after it
//     are, including ones a previous run delivered but whose position was
//     never made durable — they come back with the same End and Changes.
//  4. Errors matching changefeed.ErrRebuild mean: go back to 1.
//
// Rebuild is designed to run while Stream continues; Stream itself runs once
// at a time per Feed (ErrStreaming), and a slot admits one reader across
// processes. Confirm, Health and SlotStatus are safe for
// concurrent use with everything.
type Feed struct {
	cfg  FeedConfig
	pool *pgxpool.Pool
	repl *pgconn.Config

	streaming atomic.Bool
	closed    atomic.Bool
	res       atomic.Pointer[resolved] // the table, once resolved

	mu         sync.Mutex          // guards the fields below
	delivered  changefeed.Position // End of the last Txn handed to apply
	acked      changefeed.Position // highest position confirmed by the consumer
	wake       func()              // interrupts the running session's receive; called with mu held
	connected  bool
	started    time.Time
	target     changefeed.Position // the server's WAL end when this connection started
	caughtUp   time.Time           // per connection
	lastCaught time.Time           // per Stream, for Lag
	lastErr    error
	reconnect  int64
}

// NewFeed validates cfg and returns a Feed. It does no I/O.
func NewFeed(cfg FeedConfig) (*Feed, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.ConnString)
	if err != nil {
		return nil, fmt.Errorf("postgres: feed: %w", err)
	}
	// The replication connection's settings are the pool's, without the
	// pool's and pgx's own parameters (pool_max_conns, statement_cache_capacity,
	// …), which pgxpool.ParseConfig has taken out: sent to the server as
	// run-time parameters, they would fail every replication connection.
	rcfg := pcfg.ConnConfig.Config.Copy()
	rcfg.RuntimeParams["replication"] = "database"
	if cfg.ValueColumn != "" {
		// The walsender formats the value column by its session's
		// settings: fix them, whatever the server's defaults.
		rcfg.RuntimeParams["DateStyle"] = "ISO"
		rcfg.RuntimeParams["TimeZone"] = "UTC"
	}
	if rcfg.ConnectTimeout == 0 || rcfg.ConnectTimeout > cfg.Timeout {
		rcfg.ConnectTimeout = cfg.Timeout
	}
	if pcfg.ConnConfig.ConnectTimeout == 0 || pcfg.ConnConfig.ConnectTimeout > cfg.Timeout {
		pcfg.ConnConfig.ConnectTimeout = cfg.Timeout
	}
	if pcfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		// The feed's queries are few and small, most run once, at the
		// start: each goes in one round trip (no statement prepared
		// first), and so does a batch of them (Setup's).
		pcfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	pool, err := pgxpool.NewWithConfig(context.Background(), pcfg)
	if err != nil {
		return nil, fmt.Errorf("postgres: feed: %w", err)
	}
	return &Feed{
		cfg:  cfg,
		pool: pool,
		repl: rcfg,
	}, nil
}

// Slot returns the slot name in use: FeedConfig.Slot, or the default
// derived from the table as the server resolved it. It is "" while the
// default is unknown: the feed has not yet talked to the server (Setup,
// SlotStatus, Bootstrap or Stream).
func (f *Feed) Slot() string {
	if r := f.res.Load(); r != nil {
		return r.slot
	}
	return f.cfg.Slot
}

// Publication returns the publication name in use, as Slot does.
func (f *Feed) Publication() string {
	if r := f.res.Load(); r != nil {
		return r.pub
	}
	if f.cfg.Publication != "" {
		return f.cfg.Publication
	}
	return f.cfg.Slot
}

// Close releases the feed's connections. It does not drop the slot (see
// DropSlot). Close is idempotent; a running Stream should be cancelled first.
func (f *Feed) Close() error {
	if f.closed.CompareAndSwap(false, true) {
		f.pool.Close()
	}
	return nil
}

func (f *Feed) connectRepl(ctx context.Context) (*pgconn.PgConn, error) {
	if f.closed.Load() {
		return nil, ErrClosed
	}
	cctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	conn, err := pgconn.ConnectConfig(cctx, f.repl)
	if err != nil {
		return nil, f.wrap(ctx, cctx, "replication connection", err)
	}
	return conn, nil
}

func closeConn(conn *pgconn.PgConn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	conn.Close(ctx)
}

// SlotStatus is the slot's row in pg_replication_slots.
type SlotStatus struct {
	Exists bool
	Active bool // a walsender is streaming from it
	// WALStatus: reserved, extended, unreserved or lost.
	WALStatus      string
	ConfirmedFlush changefeed.Position // confirmed_flush_lsn
	RestartLSN     changefeed.Position // 0 once the slot is lost
	// RetainedBytes is the WAL the slot holds back: pg_current_wal_lsn()
	// minus restart_lsn (0 when lost). Export it as a gauge; a slot nobody
	// reads grows it without bound unless max_slot_wal_keep_size is set.
	RetainedBytes int64
	// SafeWALSize is how many more bytes can be written before the slot is
	// in danger of being lost (-1 when max_slot_wal_keep_size is unlimited).
	SafeWALSize int64
}

// SlotStatus reads the slot's row in pg_replication_slots. Exists is false
// (and the error nil) when there is no such slot.
func (f *Feed) SlotStatus(ctx context.Context) (SlotStatus, error) {
	r, err := f.names(ctx)
	if err != nil {
		return SlotStatus{}, err
	}
	var (
		s                SlotStatus
		walStatus        *string
		confirmed, rlsn  *string
		retained, safeSz *int64
	)
	err = f.queryRow(ctx, "slot status", `SELECT active, wal_status, confirmed_flush_lsn::text, restart_lsn::text,
		pg_wal_lsn_diff(pg_current_wal_lsn(), restart_lsn)::bigint, safe_wal_size
		FROM pg_replication_slots WHERE slot_name = $1`, []any{r.slot},
		&s.Active, &walStatus, &confirmed, &rlsn, &retained, &safeSz)
	if errors.Is(err, pgx.ErrNoRows) {
		return SlotStatus{}, nil
	}
	if err != nil {
		return SlotStatus{}, err
	}
	s.Exists = true
	if walStatus != nil {
		s.WALStatus = *walStatus
	}
	for _, p := range []struct {
		s   *string
		dst *changefeed.Position
	}{{confirmed, &s.ConfirmedFlush}, {rlsn, &s.RestartLSN}} {
		if p.s != nil {
			if *p.dst, err = parseLSN(*p.s); err != nil {
				return SlotStatus{}, err
			}
		}
	}
	if retained != nil {
		s.RetainedBytes = *retained
	}
	s.SafeWALSize = -1
	if safeSz != nil {
		s.SafeWALSize = *safeSz
	}
	return s, nil
}

// DropSlot drops the permanent slot if it exists, releasing the WAL it
// holds. It fails while a Stream (of any process) is reading the slot.
func (f *Feed) DropSlot(ctx context.Context) error {
	r, err := f.names(ctx)
	if err != nil {
		return err
	}
	return f.dropSlot(ctx, r)
}

func (f *Feed) dropSlot(ctx context.Context, r *resolved) error {
	return f.exec(ctx, "drop slot "+r.slot, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1", r.slot)
}

// checkPublication verifies the publication exists and covers the table.
// It compares names, not regclass casts: casting every row of
// pg_publication_tables would need USAGE on schemas the role has no
// business in.
func (f *Feed) checkPublication(ctx context.Context, r *resolved) error {
	var n int
	err := f.queryRow(ctx, "check publication", `SELECT count(*) FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, []any{r.pub, r.schema, r.name}, &n)
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: %s for %s", ErrNoPublication, r.pub, r.table)
	}
	return nil
}

// Bootstrap (re)creates the permanent slot and delivers, through fn, every
// non-NULL key committed before the slot's consistent point, exactly once,
// in no particular order (the key slice is valid only during the call). It
// returns that point: Stream from it delivers exactly the transactions
// committed after the COPY's snapshot, so together they miss nothing and
// repeat nothing.
//
// An existing slot of the same name is dropped first (its position is of
// no use to a consumer that bootstraps); Bootstrap fails if a walsender is
// using it. Slot creation waits for transactions already running on the
// server to finish. It returns ErrNoPublication when the publication is
// missing or does not cover the table. On error the new slot is dropped
// again. Bootstrap resets the positions Confirm has recorded.
func (f *Feed) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return f.bootstrap(ctx, func(r *resolved, snapshot string) error {
		return f.copySnapshot(ctx, r, snapshot, fn)
	})
}

// BootstrapTx is Bootstrap with a read of the consumer's own instead of the
// key COPY: it (re)creates the slot and calls fn with a read-only
// transaction holding the slot's exported snapshot, which sees exactly the
// transactions committed before the returned point; Stream from it
// delivers exactly those committed after. (A snapshot taken after the slot
// is created would not do: a transaction whose commit record precedes the
// point may still be invisible then — waiting for a synchronous standby,
// say — and the stream does not deliver it.) A table-backed expiring set
// reads its keys with their expiries through it (Expiring.ScanExpiringTx).
func (f *Feed) BootstrapTx(ctx context.Context, fn func(ctx context.Context, tx pgx.Tx) error) (changefeed.Position, error) {
	return f.bootstrap(ctx, func(_ *resolved, snapshot string) error {
		st, err := importSnapshot(ctx, f.pool, snapshot) // parallel.go
		if err != nil {
			return err
		}
		defer st.close()
		if err := fn(ctx, st.tx); err != nil {
			return err
		}
		return st.tx.Commit(ctx)
	})
}

// bootstrap (re)creates the slot and runs read under its exported snapshot.
func (f *Feed) bootstrap(ctx context.Context, read func(r *resolved, snapshot string) error) (changefeed.Position, error) {
	r, err := f.resolve(ctx)
	if err != nil {
		return 0, err
	}
	if err := f.checkPublication(ctx, r); err != nil {
		return 0, err
	}
	if err := f.dropSlot(ctx, r); err != nil {
		return 0, err
	}
	conn, err := f.connectRepl(ctx)
	if err != nil {
		return 0, err
	}
	defer closeConn(conn)
	stopWatch := f.watchSlotWait(ctx, r.slot) // slotwait.go
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, r.slot, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Mode: pglogrepl.LogicalReplication, SnapshotAction: "EXPORT_SNAPSHOT"})
	stopWatch()
	if err != nil {
		return 0, classify("create slot "+r.slot, err)
	}
	point, err := parseLSN(res.ConsistentPoint)
	if err == nil {
		// The exporting connection stays idle until the read is done: any
		// command on it would end the exported snapshot.
		err = read(r, res.SnapshotName)
	}
	if err != nil {
		dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		if derr := pglogrepl.DropReplicationSlot(dctx, conn, r.slot, pglogrepl.DropReplicationSlotOptions{}); derr != nil {
			f.cfg.Logger.Warn("bloomgate: could not drop the slot after a failed bootstrap", "slot", r.slot, "err", derr)
		}
		return 0, err
	}
	f.mu.Lock()
	f.acked, f.delivered = 0, point
	f.mu.Unlock()
	return point, nil
}

// copySnapshot runs the key COPY on an ordinary connection that imports the
// exported snapshot.
func (f *Feed) copySnapshot(ctx context.Context, r *resolved, snapshot string, fn func([]byte) error) error {
	if parts := f.bootstrapParts(); parts > 1 { // parallel.go
		return copySnapshotKeys(ctx, f.pool, snapshot, r.table, f.cfg.Column, parts, fn)
	}
	st, err := importSnapshot(ctx, f.pool, snapshot) // parallel.go
	if err != nil {
		return err
	}
	defer st.close()
	tx := st.tx
	if err := f.copyKeys(ctx, tx.Conn().PgConn(), r, fn); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func (f *Feed) copyKeys(ctx context.Context, pc *pgconn.PgConn, r *resolved, fn func([]byte) error) error {
	err := copyKeys(ctx, pc, "COPY (SELECT "+pgx.Identifier{f.cfg.Column}.Sanitize()+" FROM "+r.table+") TO STDOUT", fn)
	if err != nil {
		return classify("copy", err)
	}
	return nil
}

// Rebuild reads a fresh copy of the keys for a new generation while Stream
// keeps running on the permanent slot. It creates a temporary slot, COPYs
// the keys through fn under the slot's own snapshot, and drops the slot
// again by closing its connection. It returns the slot's consistent point
// P: the COPY holds exactly the transactions with Txn.Commit < P, so the
// consumer applies to the new generation every Txn with Commit >= P.
// Transactions Stream delivered before Rebuild was called all have
// Commit < P, so buffering those delivered from the call on is enough.
func (f *Feed) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	r, err := f.resolve(ctx)
	if err != nil {
		return 0, err
	}
	conn, err := f.connectRepl(ctx)
	if err != nil {
		return 0, err
	}
	defer closeConn(conn)
	var b [4]byte
	rand.Read(b[:])
	tmp := r.slot[:min(len(r.slot), 50)] + "_rb" + hex.EncodeToString(b[:])
	if _, err := conn.Exec(ctx, "BEGIN READ ONLY ISOLATION LEVEL REPEATABLE READ").ReadAll(); err != nil {
		return 0, fmt.Errorf("postgres: rebuild: %w", err)
	}
	stopWatch := f.watchSlotWait(ctx, tmp)
	res, err := pglogrepl.CreateReplicationSlot(ctx, conn, tmp, "pgoutput",
		pglogrepl.CreateReplicationSlotOptions{Temporary: true, Mode: pglogrepl.LogicalReplication, SnapshotAction: "USE_SNAPSHOT"})
	stopWatch()
	if err != nil {
		return 0, classify("rebuild: create temporary slot", err)
	}
	point, err := parseLSN(res.ConsistentPoint)
	if err != nil {
		return 0, err
	}
	if err := f.copyKeys(ctx, conn, r, fn); err != nil {
		return 0, err
	}
	if _, err := conn.Exec(ctx, "COMMIT").ReadAll(); err != nil {
		return 0, fmt.Errorf("postgres: rebuild: %w", err)
	}
	return point, nil
}

// Confirm records that the consumer's state up to and including p is
// durable; it may be called from inside apply, for the Txn being applied.
// The feed then reports p to the server as its flush and apply position
// (write: the last delivered one), and the server may recycle the WAL
// before it. p must not be beyond the last delivered position
// (Health().Delivered: the latest Txn.End handed to apply, else the position
// Stream started from or Bootstrap returned); otherwise ErrNotDelivered.
// Confirming a position at or below an earlier one is a no-op. Confirm does
// not wait for the server: it wakes the running Stream, which sends the
// update; without a running Stream the next Stream sends it when it starts.
//
// Never confirm a position whose state a restarting consumer could not
// restore: the server never goes back, so the changes in between would be
// lost (the next Stream reports ErrStalePosition rather than skip them).
func (f *Feed) Confirm(ctx context.Context, p changefeed.Position) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if p > f.delivered {
		return fmt.Errorf("%w: %s > %s", ErrNotDelivered, FormatLSN(p), FormatLSN(f.delivered))
	}
	if p > f.acked {
		f.acked = p
		if f.wake != nil {
			f.wake()
		}
	}
	return nil
}

// Health is the feed's state, for the consumer's fail-open decision.
type Health struct {
	Streaming bool                // Stream is running
	Connected bool                // and holds an accepted replication connection
	Delivered changefeed.Position // End of the last Txn handed to apply, else the start position
	Confirmed changefeed.Position // highest Confirm
	// CaughtUp is the local time at which a server keepalive last arrived
	// between transactions, reporting a position at or beyond the end of
	// WAL when the current replication connection started: everything
	// committed before that connection had been delivered, and everything
	// the server had decoded since. Zero until then, after each reconnection
	// too. (Under heavy write load the server decodes behind the end of WAL,
	// so it may overstate freshness by that delay.)
	CaughtUp time.Time
	// Lag is the time since the feed was last caught up in this Stream
	// (across reconnections), or since Stream started when it never was (0
	// when not streaming). The consumer decides how much is too much:
	// Gate.Follow fails open past FollowConfig.MaxLag.
	Lag time.Duration
	// Reconnects counts the replication connections this Stream lost and
	// replaced.
	Reconnects int64
	// Err is the error of the last failed connection attempt or stream,
	// nil once connected again.
	Err error
}

// Head returns the server's current WAL write position: every transaction
// committed now ends at or before it, so a consumer whose stream has passed
// it has seen them all (bloomgate.Gate.Follow uses it to decide readiness).
func (f *Feed) Head(ctx context.Context) (changefeed.Position, error) {
	var lsn string
	if err := f.queryRow(ctx, "current WAL position", "SELECT pg_current_wal_lsn()::text", nil, &lsn); err != nil {
		return 0, err
	}
	return parseLSN(lsn)
}

var _ changefeed.Feed = (*Feed)(nil)

// Err returns the error of the feed's last failed connection attempt or
// stream while Stream retries, nil once connected again (Health().Err).
// Gate.Follow shows it in the gate's state while it fails open.
func (f *Feed) Err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lastErr
}

// Estimate returns the planner's row estimate for the table
// (pg_class.reltuples; 0 for a table never analysed), within the feed's
// Timeout. Gate.Follow sizes its first filter with it.
func (f *Feed) Estimate(ctx context.Context) (int64, error) {
	r, err := f.names(ctx)
	if err != nil {
		return 0, err
	}
	var n float64
	if err := f.queryRow(ctx, "estimate", "SELECT reltuples FROM pg_class WHERE oid = $1", []any{r.oid}, &n); err != nil {
		return 0, err
	}
	return max(int64(n), 0), nil
}

// Health reports the feed's state.
func (f *Feed) Health() Health {
	f.mu.Lock()
	defer f.mu.Unlock()
	h := Health{
		Streaming:  f.streaming.Load(),
		Connected:  f.connected,
		Delivered:  f.delivered,
		Confirmed:  f.acked,
		CaughtUp:   f.caughtUp,
		Err:        f.lastErr,
		Reconnects: f.reconnect,
	}
	if h.Streaming {
		since := f.lastCaught
		if since.IsZero() {
			since = f.started
		}
		h.Lag = time.Since(since)
	}
	return h
}

// Stream delivers the table's committed transactions after position from
// (the Bootstrap point, or a Txn.End the consumer made durable) to apply, one at a time, in WAL order, with strictly increasing End. It
// first checks the slot: missing or lost gives ErrSlotLost, a
// confirmed_flush_lsn beyond from gives ErrStalePosition.
//
// On a lost connection or a server error Stream reconnects with backoff
// and resumes after the last delivered transaction, so within one Stream no
// transaction is delivered twice or skipped; Health reports the outage.
// Stream returns when ctx is done (ctx's error), when apply fails (its
// error, wrapped), on a changefeed.ErrRebuild condition, on ErrProtocol or
// ErrKeyColumn, or when the server refuses the role, publication or table.
//
// Alongside transactions Stream delivers progress markers (Txns without
// Changes, see Txn) so that a consumer of a quiet table can confirm a
// position and let the server recycle WAL.
func (f *Feed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	if from == 0 {
		return errors.New("postgres: Stream needs a position (from Bootstrap, Rebuild or a delivered Txn.End)")
	}
	if !f.streaming.CompareAndSwap(false, true) {
		return ErrStreaming
	}
	f.mu.Lock()
	if f.acked > from {
		f.acked = 0
	}
	f.delivered, f.started, f.caughtUp, f.lastCaught, f.lastErr, f.reconnect = from, time.Now(), time.Time{}, time.Time{}, nil, 0
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		f.connected = false
		f.mu.Unlock()
		f.streaming.Store(false)
	}()
	retry := backoff.Backoff{Min: 100 * time.Millisecond, Max: f.cfg.MaxBackoff}
	for {
		connected, err := f.streamOnce(ctx, apply)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if fatal(err) {
			return err
		}
		f.mu.Lock()
		f.connected, f.lastErr = false, err
		f.reconnect++
		f.mu.Unlock()
		if connected {
			retry.Reset()
		}
		f.cfg.Logger.Warn("bloomgate: change feed interrupted, reconnecting", "slot", f.Slot(), "in", retry.Delay(), "err", err)
		if err := retry.Wait(ctx); err != nil {
			return err
		}
	}
}

// errApply wraps apply's error so that fatal recognises it.
type errApply struct{ err error }

func (e errApply) Error() string { return "postgres: apply: " + e.err.Error() }
func (e errApply) Unwrap() error { return e.err }

// fatal says whether Stream must give up rather than reconnect.
func fatal(err error) bool {
	var ea errApply
	if errors.As(err, &ea) || errors.Is(err, changefeed.ErrRebuild) || errors.Is(err, ErrProtocol) ||
		errors.Is(err, changefeed.ErrSetup) || errors.Is(err, ErrClosed) {
		return true
	}
	var pg *pgconn.PgError
	if errors.As(err, &pg) && len(pg.Code) == 5 {
		switch pg.Code[:2] {
		case "28", "42", "3D": // authorization, missing object or privilege, no such database
			return true
		}
	}
	return false
}

// streamOnce runs one replication connection. connected reports whether
// START_REPLICATION was accepted.
func (f *Feed) streamOnce(ctx context.Context, apply func(changefeed.Txn) error) (connected bool, err error) {
	// The replication connection is dialled beside the checks below (a
	// new server process and its authentication, the longest step of a
	// start that has little to catch up); START_REPLICATION waits for
	// them.
	dial := make(chan struct{})
	var conn *pgconn.PgConn
	var dialErr error
	go func() {
		defer close(dial)
		conn, dialErr = f.connectRepl(ctx)
	}()
	defer func() {
		<-dial
		if conn != nil {
			closeConn(conn)
		}
	}()
	r, err := f.resolve(ctx)
	if err != nil {
		return false, err
	}
	st, err := f.SlotStatus(ctx)
	if err != nil {
		return false, err
	}
	if !st.Exists {
		return false, fmt.Errorf("%w: %s does not exist", ErrSlotLost, r.slot)
	}
	if st.WALStatus == "lost" {
		return false, fmt.Errorf("%w: %s has wal_status lost", ErrSlotLost, r.slot)
	}
	f.mu.Lock()
	from := f.delivered
	if from < st.ConfirmedFlush {
		f.mu.Unlock()
		return false, fmt.Errorf("%w: %s < %s", ErrStalePosition, FormatLSN(from), FormatLSN(st.ConfirmedFlush))
	}
	f.acked = max(f.acked, st.ConfirmedFlush)
	f.mu.Unlock()
	if err := f.checkPublication(ctx, r); err != nil {
		return false, err
	}
	target, err := f.Head(ctx)
	if err != nil {
		return false, err
	}
	f.mu.Lock()
	f.target, f.caughtUp = target, time.Time{}
	f.mu.Unlock()
	<-dial
	if dialErr != nil {
		return false, dialErr
	}
	sctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	err = pglogrepl.StartReplication(sctx, conn, r.slot, pglogrepl.LSN(from), pglogrepl.StartReplicationOptions{
		Mode:       pglogrepl.LogicalReplication,
		PluginArgs: []string{"proto_version '1'", "publication_names '" + r.pub + "'"},
	})
	cancel()
	if err != nil {
		return false, f.wrap(ctx, sctx, "start replication at "+FormatLSN(from), err)
	}
	f.mu.Lock()
	f.connected, f.lastErr = true, nil
	f.mu.Unlock()
	s := &session{f: f, conn: conn, dec: newDecoder(r.oid, f.cfg.Column, f.cfg.ValueColumn), apply: apply}
	return true, s.run(ctx)
}

// session is one replication connection's receive loop.
//
// The loop receives without a context: pgconn would arm a context watcher
// (context.AfterFunc and a channel) per message, and a deadline context
// costs a timer per message. The wait is bounded by the connection's read
// deadline instead, set to the next status update; a Confirm during the
// wait and the end of ctx interrupt it by moving the deadline into the past.
// A read that times out leaves the connection usable: pgconn keeps it open
// on a timeout, and pgproto3 resumes a message it had begun to read.
type session struct {
	f       *Feed
	conn    *pgconn.PgConn
	dec     *decoder
	apply   func(changefeed.Txn) error
	sentAck changefeed.Position
	asked   time.Time // when the oldest status update asking for a reply still unanswered was sent

	wake        func()    // s.interrupt, made once
	deadline    time.Time // the read deadline last set by the loop
	interrupted bool      // the read deadline was moved into the past since; guarded by f.mu
	out         []byte    // the encoded status update, reused
}

// aLongTimeAgo is a read deadline that has passed: a read waiting returns at
// once with a timeout.
var aLongTimeAgo = time.Unix(1, 0)

// interrupt makes a receive under way (or the next one) return with a
// timeout. f.mu must be held.
func (s *session) interrupt() {
	s.interrupted = true
	s.conn.Conn().SetReadDeadline(aLongTimeAgo)
}

func (s *session) run(ctx context.Context) error {
	f := s.f
	nc := s.conn.Conn()
	s.wake = s.interrupt
	stopCtx := context.AfterFunc(ctx, func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		s.interrupt()
	})
	defer func() {
		stopCtx()
		// Best effort: report a confirmation that arrived at the end.
		f.mu.Lock()
		f.wake = nil
		pending := f.acked != s.sentAck
		f.mu.Unlock()
		if pending {
			s.status(false)
		}
		nc.SetDeadline(time.Time{}) // for closeConn's Terminate
	}()
	nextStatus := time.Now()
	woken := false
	for {
		if !s.asked.IsZero() && time.Since(s.asked) > f.cfg.Timeout {
			return fmt.Errorf("postgres: replication connection: %w: no reply for %v to a status update asking for one",
				changefeed.ErrTimeout, time.Since(s.asked).Round(time.Millisecond))
		}
		if !time.Now().Before(nextStatus) {
			if err := s.status(true); err != nil {
				return err
			}
			nextStatus = time.Now().Add(f.cfg.StatusInterval)
		}
		// The deadline is set before Confirm may interrupt the wait and
		// before pending and ctx are read: an interruption from then on
		// moves it into the past again, one before is seen below.
		f.mu.Lock()
		reset := s.interrupted || !s.deadline.Equal(nextStatus)
		s.interrupted = false
		f.mu.Unlock()
		if reset {
			if err := nc.SetReadDeadline(nextStatus); err != nil {
				return fmt.Errorf("postgres: replication receive: %w", err)
			}
			s.deadline = nextStatus
		}
		f.mu.Lock()
		f.wake = s.wake
		pending := f.acked != s.sentAck
		f.mu.Unlock()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		// A confirmation is sent before the loop waits for the server;
		// messages already received come first, so that a burst of
		// transactions confirmed inside apply makes one status update.
		if pending && (woken || s.conn.Frontend().ReadBufferLen() == 0) {
			if err := s.status(false); err != nil {
				return err
			}
		}
		msg, err := s.conn.ReceiveMessage(context.Background())
		f.mu.Lock()
		f.wake = nil // a Confirm inside apply is seen above, without an interruption
		f.mu.Unlock()
		woken = false
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if pgconn.Timeout(err) && !s.conn.IsClosed() {
				woken = true
				continue // status deadline or Confirm: the connection is intact
			}
			return fmt.Errorf("postgres: replication receive: %w", err)
		}
		s.asked = time.Time{}
		switch msg := msg.(type) {
		case *pgproto3.CopyData:
			if err := s.copyData(msg.Data); err != nil {
				return err
			}
		case *pgproto3.ErrorResponse:
			return pgconn.ErrorResponseToPgError(msg)
		case *pgproto3.CopyDone:
			return errors.New("postgres: server ended the replication stream")
		}
	}
}

func (s *session) copyData(data []byte) error {
	if len(data) == 0 {
		return fmt.Errorf("%w: empty CopyData", ErrProtocol)
	}
	switch data[0] {
	case pglogrepl.PrimaryKeepaliveMessageByteID:
		k, err := pglogrepl.ParsePrimaryKeepaliveMessage(data[1:])
		if err != nil {
			return fmt.Errorf("%w: keepalive: %v", ErrProtocol, err)
		}
		return s.keepalive(k)
	case pglogrepl.XLogDataByteID:
		x, err := pglogrepl.ParseXLogData(data[1:])
		if err != nil {
			return fmt.Errorf("%w: XLogData: %v", ErrProtocol, err)
		}
		t, err := s.dec.message(x.WALData)
		if err != nil || t == nil {
			return err
		}
		return s.deliver(*t)
	}
	return nil
}

func (s *session) keepalive(k pglogrepl.PrimaryKeepaliveMessage) error {
	f := s.f
	if !s.dec.inTxn {
		// Between transactions: everything the server decoded before
		// ServerWALEnd has been delivered.
		f.mu.Lock()
		if changefeed.Position(k.ServerWALEnd) >= f.target {
			f.caughtUp = time.Now()
			f.lastCaught = f.caughtUp
		}
		delivered := f.delivered
		f.mu.Unlock()
		if p := changefeed.Position(k.ServerWALEnd); p > delivered {
			if err := s.deliver(changefeed.Txn{Commit: p, End: p}); err != nil {
				return err
			}
		}
	}
	if k.ReplyRequested {
		return s.status(false)
	}
	return nil
}

// deliver hands t to apply unless its position was already delivered.
func (s *session) deliver(t changefeed.Txn) error {
	f := s.f
	f.mu.Lock()
	dup := t.End <= f.delivered
	if !dup {
		// Delivered as soon as it is handed over, so that apply itself (or
		// another goroutine it signals) may Confirm t.End.
		f.delivered = t.End
	}
	f.mu.Unlock()
	if dup {
		return nil
	}
	if err := s.apply(t); err != nil {
		return errApply{err}
	}
	return nil
}

// status sends a standby status update: write = the last delivered
// position, flush = apply = the last confirmed one, all three set
// explicitly. The write is bounded by Timeout through the connection's write
// deadline (pgconn's context does not reach a CopyData sent unbuffered).
func (s *session) status(replyRequested bool) error {
	f := s.f
	f.mu.Lock()
	ack, deliv := f.acked, f.delivered
	f.mu.Unlock()
	if ack == 0 {
		return nil // nothing confirmed: never let 0 become "write"
	}
	now := time.Now()
	s.out = appendStatus(s.out[:0], deliv, ack, now, replyRequested)
	if err := s.conn.Conn().SetWriteDeadline(now.Add(f.cfg.Timeout)); err != nil {
		return fmt.Errorf("postgres: standby status: %w", err)
	}
	if err := s.conn.Frontend().SendUnbufferedEncodedCopyData(s.out); err != nil {
		return fmt.Errorf("postgres: standby status: %w", err)
	}
	s.sentAck = ack
	if replyRequested && s.asked.IsZero() {
		s.asked = now
	}
	return nil
}

// appendStatus appends a CopyData holding a standby status update
// (https://www.postgresql.org/docs/current/protocol-replication.html), the
// message pglogrepl.SendStandbyStatusUpdate sends, without its two
// allocations.
func appendStatus(b []byte, write, flush changefeed.Position, now time.Time, replyRequested bool) []byte {
	const body = 1 + 8 + 8 + 8 + 8 + 1
	b = append(b, 'd')
	b = binary.BigEndian.AppendUint32(b, 4+body)
	b = append(b, pglogrepl.StandbyStatusUpdateByteID)
	b = binary.BigEndian.AppendUint64(b, uint64(write))
	b = binary.BigEndian.AppendUint64(b, uint64(flush))
	b = binary.BigEndian.AppendUint64(b, uint64(flush)) // apply
	b = binary.BigEndian.AppendUint64(b, uint64(now.UnixMicro()-pgEpochMicros))
	if replyRequested {
		return append(b, 1)
	}
	return append(b, 0)
}

// pgEpochMicros is PostgreSQL's epoch, 2000-01-01 UTC, in microseconds
// since the Unix epoch.
const pgEpochMicros = 946684800 * 1000000
