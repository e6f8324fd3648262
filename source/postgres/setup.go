package postgres

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrWALLevel reports a server whose wal_level is not logical: no
// replication slot can decode changes until it is set and the server
// restarted. It wraps changefeed.ErrSetup.
var ErrWALLevel = fmt.Errorf("%w: wal_level is not logical", changefeed.ErrSetup)

// SetupPlan is what a DBA runs so that a Feed can work: see Feed.Setup.
type SetupPlan struct {
	// WALLevel is the server's wal_level. Anything but "logical" needs
	// ALTER SYSTEM SET wal_level = logical and a restart (on managed services
	// a parameter such as rds.logical_replication or
	// cloudsql.logical_decoding, and a reboot).
	WALLevel string
	// Statements create or fix the publication (one table, no row filter,
	// no column list) and the role (LOGIN REPLICATION, SELECT on the table).
	// Run them as a superuser or the table's owner; they change no data.
	Statements []string
	// Notes are advice not run by ApplySetup: replica identity (what deletes
	// need) and max_slot_wal_keep_size (what bounds a forgotten slot).
	Notes []string
}

// CheckWALLevel returns nil when wal_level is logical, else an error
// wrapping ErrWALLevel that says what to do.
func (p SetupPlan) CheckWALLevel() error {
	if p.WALLevel == "logical" {
		return nil
	}
	return fmt.Errorf("%w (it is %q): run ALTER SYSTEM SET wal_level = logical as a superuser and restart PostgreSQL; "+
		"on a managed service set its logical-replication parameter and reboot", ErrWALLevel, p.WALLevel)
}

// SetupOptions are the operator's choices for Setup.
type SetupOptions struct {
	// Role is the role the feed connects as; "" leaves roles out.
	Role string
}

// Setup inspects the server and returns the statements that make the
// feed's publication and role right, with advice. Setup changes nothing.
func (f *Feed) Setup(ctx context.Context, opts SetupOptions) (SetupPlan, error) {
	role := opts.Role
	var p SetupPlan
	var version int
	var keepSize string
	if err := f.pool.QueryRow(ctx, "SELECT current_setting('wal_level'), current_setting('server_version_num')::int, current_setting('max_slot_wal_keep_size')").
		Scan(&p.WALLevel, &version, &keepSize); err != nil {
		return p, fmt.Errorf("postgres: setup: %w", err)
	}
	r, err := f.resolve(ctx)
	if err != nil {
		return p, err
	}
	var ident string
	if err := f.queryRow(ctx, "setup: replica identity", "SELECT relreplident::text FROM pg_class WHERE oid = $1", []any{r.oid}, &ident); err != nil {
		return p, err
	}
	if err := f.planPublication(ctx, &p, version, r); err != nil {
		return p, err
	}
	if role != "" {
		if err := f.planRole(ctx, &p, role, r); err != nil {
			return p, err
		}
	}
	if err := f.planIdentity(ctx, &p, ident, r); err != nil {
		return p, err
	}
	if keepSize == "-1" {
		p.Notes = append(p.Notes, "max_slot_wal_keep_size is unlimited: a slot nobody reads keeps WAL until the disk fills. "+
			"Cap it (the feed then reports ErrSlotLost and the gate rebuilds): ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf();")
	}
	return p, nil
}

func (f *Feed) planPublication(ctx context.Context, p *SetupPlan, version int, r *resolved) error {
	table, pub := r.table, pgx.Identifier{r.pub}.Sanitize()
	var exists bool
	if err := f.queryRow(ctx, "setup: publication", "SELECT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = $1)", []any{r.pub}, &exists); err != nil {
		return err
	}
	if !exists {
		p.Statements = append(p.Statements, "CREATE PUBLICATION "+pub+" FOR TABLE "+table)
		return nil
	}
	q := `SELECT count(*), bool_or(false) FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`
	args := []any{r.pub, r.schema, r.name}
	if version >= 150000 {
		q = `SELECT count(*), coalesce(bool_or(rowfilter IS NOT NULL OR NOT ($4 = ANY(attnames))), false) FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`
		args = append(args, f.cfg.Column)
	}
	var n int
	var filtered bool
	if err := f.queryRow(ctx, "setup: publication tables", q, args, &n, &filtered); err != nil {
		return err
	}
	switch {
	case n == 0:
		p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" ADD TABLE "+table)
	case filtered:
		// SET TABLE without WHERE or a column list drops both. A row filter
		// on updates can make the application's UPDATEs fail, and one
		// hiding rows would hide keys.
		p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" SET TABLE "+table)
	}
	return nil
}

func (f *Feed) planRole(ctx context.Context, p *SetupPlan, role string, rt *resolved) error {
	r := pgx.Identifier{role}.Sanitize()
	schema, table := rt.schema, rt.table
	var exists, repl bool
	err := f.queryRow(ctx, "setup: role", "SELECT true, rolreplication OR rolsuper FROM pg_roles WHERE rolname = $1", []any{role}, &exists, &repl)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return err
	}
	switch {
	case !exists:
		p.Statements = append(p.Statements, "CREATE ROLE "+r+" WITH LOGIN REPLICATION")
		p.Notes = append(p.Notes, "give "+role+" a password or another authentication method in pg_hba.conf (ALTER ROLE "+r+" PASSWORD '…')")
	case !repl:
		p.Statements = append(p.Statements, "ALTER ROLE "+r+" WITH REPLICATION")
	}
	p.Statements = append(p.Statements,
		"GRANT USAGE ON SCHEMA "+pgx.Identifier{schema}.Sanitize()+" TO "+r,
		"GRANT SELECT ON "+table+" TO "+r)
	return nil
}

// planIdentity explains what deletes and key updates will look like, and
// how to make them exact.
func (f *Feed) planIdentity(ctx context.Context, p *SetupPlan, ident string, r *resolved) error {
	table := r.table
	var covered, notNull bool
	var index *string
	err := f.pool.QueryRow(ctx, `SELECT
		coalesce((SELECT a.attnum = ANY(i.indkey::int2[]) FROM pg_index i
			WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))), false),
		a.attnotnull,
		(SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
			WHERE i.indrelid = c.oid AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
			AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum AND i.indimmediate ORDER BY 1 LIMIT 1)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped
		WHERE c.oid = $1`, r.oid, f.cfg.Column).Scan(&covered, &notNull, &index)
	if errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("postgres: setup: column %q not in %s", f.cfg.Column, f.cfg.Table)
	}
	if err != nil {
		return fmt.Errorf("postgres: setup: %w", err)
	}
	if ident == "f" || covered {
		p.Notes = append(p.Notes, "replica identity covers the key: deletes and key updates carry the old key, so filters that can delete stay exact")
		return nil
	}
	advice := "replica identity does not include " + f.cfg.Column + ": a DELETE, or an UPDATE, does not say which key left, " +
		"so the feed counts an unknown delete toward the rebuild trigger for each. To make them exact, "
	col := pgx.Identifier{f.cfg.Column}.Sanitize()
	switch {
	case index != nil && notNull:
		advice += "ALTER TABLE " + table + " REPLICA IDENTITY USING INDEX " + pgx.Identifier{*index}.Sanitize() + ";"
	case index != nil:
		advice += "make the key NOT NULL and use its unique index (ALTER TABLE " + table + " ALTER " + col +
			" SET NOT NULL; ALTER TABLE " + table + " REPLICA IDENTITY USING INDEX " + pgx.Identifier{*index}.Sanitize() +
			";), or ALTER TABLE " + table + " REPLICA IDENTITY FULL; (more WAL per update and delete)"
	default:
		advice += "ALTER TABLE " + table + " REPLICA IDENTITY FULL; (more WAL per update and delete; an index on an expression cannot be the replica identity)"
	}
	p.Notes = append(p.Notes, advice)
	return nil
}

// ApplySetup runs plan.Statements in order, stopping at the first error.
// It does not change wal_level or the replica identity.
func (f *Feed) ApplySetup(ctx context.Context, plan SetupPlan) error {
	for _, s := range plan.Statements {
		if _, err := f.pool.Exec(ctx, s); err != nil {
			return fmt.Errorf("postgres: setup: %s: %w", s, err)
		}
	}
	return nil
}
