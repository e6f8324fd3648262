package postgres

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/changefeed"
)

// Errors an operator must fix. Each wraps changefeed.ErrSetup, so a consumer
// (Gate.Follow) tells them from outages without importing this package.
var (
	// ErrPermission: the role lacks a privilege the feed needs (REPLICATION,
	// USAGE on the table's schema, SELECT on the table, a pg_hba.conf
	// replication line). `bloomgate feed setup` prints the grants.
	ErrPermission = fmt.Errorf("%w: permission denied", changefeed.ErrSetup)
	// ErrNoTable: the table does not exist, or the role cannot see it.
	ErrNoTable = fmt.Errorf("%w: table not found", changefeed.ErrSetup)
)

// resolved is the followed table as the server names it, and the slot and
// publication names derived from it.
type resolved struct {
	oid          uint32
	schema, name string // as in pg_namespace and pg_class
	table        string // sanitized schema-qualified identifier
	slot, pub    string
}

// resolve looks the table up on the server: its OID and its schema-qualified
// name, from which the default slot and publication names are derived, so
// that "users" and "public.users" name the same slot. It runs on every
// bootstrap and stream connection (a table dropped and created again has a
// new OID).
func (f *Feed) resolve(ctx context.Context) (*resolved, error) {
	if f.closed.Load() {
		return nil, ErrClosed
	}
	r := &resolved{}
	err := f.queryRow(ctx, "resolve table "+f.cfg.Table, resolveSQL, []any{f.cfg.Table}, &r.oid, &r.schema, &r.name)
	return f.resolved(ctx, r, err)
}

// resolveSQL is resolve's query: the table's OID, schema and name.
const resolveSQL = `SELECT c.oid, n.nspname, c.relname
		FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = to_regclass($1)`

// resolved completes r, read by resolveSQL with error err (already
// wrapped, unless pgx.ErrNoRows), and makes it the feed's.
func (f *Feed) resolved(ctx context.Context, r *resolved, err error) (*resolved, error) {
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, fmt.Errorf("%w: %s (or the role lacks USAGE on its schema)", ErrNoTable, f.cfg.Table)
	}
	if err != nil {
		return nil, err
	}
	r.table = pgx.Identifier{r.schema, r.name}.Sanitize()
	r.slot, r.pub = f.cfg.Slot, f.cfg.Publication
	if r.slot == "" {
		r.slot = DefaultName(r.schema+"."+r.name, f.cfg.Column)
	}
	if r.pub == "" {
		r.pub = r.slot
	}
	if !validName(r.slot) || !validName(r.pub) {
		return nil, fmt.Errorf("postgres: slot %q / publication %q: use 1-63 of a-z, 0-9, _", r.slot, r.pub)
	}
	if old := f.res.Swap(r); old == nil && f.cfg.Slot == "" {
		f.warnLegacySlot(ctx, r)
	}
	return r, nil
}

// warnLegacySlot logs a slot named after the table as spelled (the default
// of earlier releases for an unqualified table) that is not the slot in use:
// nobody reads it, and it holds WAL until it is dropped.
func (f *Feed) warnLegacySlot(ctx context.Context, r *resolved) {
	legacy := DefaultName(f.cfg.Table, f.cfg.Column)
	if legacy == r.slot {
		return
	}
	var exists bool
	if err := f.queryRow(ctx, "legacy slot", "SELECT EXISTS (SELECT 1 FROM pg_replication_slots WHERE slot_name = $1)",
		[]any{legacy}, &exists); err == nil && exists {
		f.cfg.Logger.Warn("bloomgate: a slot named after the unqualified table exists and is not the one in use; "+
			"it holds WAL until dropped (SELECT pg_drop_replication_slot('"+legacy+"'))", "unused", legacy, "slot", r.slot)
	}
}

// names returns the slot and publication in use, resolving the table first
// if it was never resolved.
func (f *Feed) names(ctx context.Context) (*resolved, error) {
	if r := f.res.Load(); r != nil {
		return r, nil
	}
	return f.resolve(ctx)
}

// oneTrip makes a query's arguments run it in one round trip (pgx's
// QueryExecModeExec: parameter types from the Go types, no statement
// prepared first). The feed's queries are few and small, most run once,
// at the start, where the cached statements' prepare doubled their round
// trips.
func oneTrip(args []any) []any { return append([]any{pgx.QueryExecModeExec}, args...) }

// queryRow runs one single-row query within the feed's Timeout, in one
// round trip.
func (f *Feed) queryRow(ctx context.Context, what, sql string, args []any, dst ...any) error {
	qctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	err := f.pool.QueryRow(qctx, sql, oneTrip(args)...).Scan(dst...)
	if errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	return f.wrap(ctx, qctx, what, err)
}

// exec runs one statement within the feed's Timeout, in one round trip.
func (f *Feed) exec(ctx context.Context, what, sql string, args ...any) error {
	qctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	_, err := f.pool.Exec(qctx, sql, oneTrip(args)...)
	return f.wrap(ctx, qctx, what, err)
}

// wrap names what failed and classifies the error: a timeout (qctx, or the
// pool's connect timeout, expired before ctx) wraps changefeed.ErrTimeout, a
// refused privilege ErrPermission.
func (f *Feed) wrap(ctx, qctx context.Context, what string, err error) error {
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && (qctx.Err() != nil || errors.Is(err, context.DeadlineExceeded)) {
		return fmt.Errorf("postgres: %s: %w (%v): %v", what, changefeed.ErrTimeout, f.cfg.Timeout, err)
	}
	return classify(what, err)
}

// classify wraps a server error that retrying cannot heal in its sentinel.
func classify(what string, err error) error {
	var pg *pgconn.PgError
	if errors.As(err, &pg) {
		switch {
		case pg.Code == "42501" || strings.HasPrefix(pg.Code, "28"):
			return fmt.Errorf("postgres: %s: %w: %w", what, ErrPermission, err)
		case pg.Code == "55000" && strings.Contains(pg.Message, "wal_level"):
			return fmt.Errorf("postgres: %s: %w: %w", what, ErrWALLevel, err)
		case pg.Code == "55006" && strings.Contains(pg.Message, "replication slot"):
			// Retried: it may be this process's previous connection, which
			// the server has not seen close yet.
			return fmt.Errorf("postgres: %s: %w (another process follows this table with the same slot, or a previous run's connection is not closed yet: give each process following the table its own slot — FeedConfig.Slot, a set's slot — or share one feed through fan-out)", what, err)
		}
	}
	return fmt.Errorf("postgres: %s: %w", what, err)
}
