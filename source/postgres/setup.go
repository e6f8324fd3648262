package postgres

import (
	"context"
	"errors"
	"fmt"
	"slices"

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
	// Statements set the replica identity the operator chose
	// (SetupOptions.Identity), create or fix the publication (one table, no
	// row filter, no column list) and the role (LOGIN REPLICATION, USAGE on
	// the schema, SELECT on the table). Run them as a superuser or the
	// table's owner; they change no data, and never what the application
	// may do.
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

// ErrReplicaIdentity reports a table without a replica identity PostgreSQL
// can use (no primary key, or REPLICA IDENTITY NOTHING) while the
// publication would publish its updates and deletes: PostgreSQL would then
// refuse the application's UPDATE and DELETE. Setup returns it, explaining
// the choices, unless SetupOptions.Identity picks one. It wraps
// changefeed.ErrSetup.
var ErrReplicaIdentity = fmt.Errorf("%w: the table has no usable replica identity", changefeed.ErrSetup)

// Identity is the operator's choice for a table's replica identity.
type Identity int

const (
	// IdentityUnchanged leaves the replica identity as it is. Setup refuses
	// (ErrReplicaIdentity) when it cannot carry updates and deletes.
	IdentityUnchanged Identity = iota
	// IdentityFull sets REPLICA IDENTITY FULL: every UPDATE and DELETE logs
	// the whole old row (more WAL), and the feed sees every old key.
	IdentityFull
	// IdentityIndex sets REPLICA IDENTITY USING INDEX SetupOptions.Index:
	// a unique, non-partial index without expressions on NOT NULL columns.
	// The feed sees old keys only when the index covers the key column.
	IdentityIndex
	// IdentityInsertsOnly publishes only inserts and truncates, which need
	// no replica identity. Deletes are never seen (each costs a false
	// positive until the next rebuild: set Config.RebuildInterval), and
	// neither are updates: choose it only for a table whose key column is
	// never updated, or an updated key is missed until the next rebuild.
	IdentityInsertsOnly
)

func (i Identity) String() string {
	switch i {
	case IdentityUnchanged:
		return "unchanged"
	case IdentityFull:
		return "full"
	case IdentityIndex:
		return "index"
	case IdentityInsertsOnly:
		return "inserts"
	}
	return fmt.Sprintf("Identity(%d)", int(i))
}

// SetupOptions are the operator's choices for Setup.
type SetupOptions struct {
	// Role is the role the feed connects as; "" leaves roles out.
	Role string
	// Identity is what Setup does about the table's replica identity.
	// Default: IdentityUnchanged.
	Identity Identity
	// Index names the index for IdentityIndex. Default: the key column's
	// own unique index if it qualifies, else the first that does.
	Index string
}

// tableIdentity is what the server says about a table's replica identity.
type tableIdentity struct {
	ident      string   // pg_class.relreplident: d, n, f, i
	usable     bool     // UPDATE and DELETE work under a publication of them
	candidates []string // indexes that can be the identity, the key column's own first
	insertOnly bool     // the publication exists and publishes neither updates nor deletes
}

// Setup inspects the server and returns the statements that make the
// feed's publication and role right, with advice. Setup changes nothing.
//
// Its queries go in two round trips (a server start's checks wait on
// them): the settings with the table's lookup, then everything about the
// table and the publication (the role's, when asked, in a third).
func (f *Feed) Setup(ctx context.Context, opts SetupOptions) (SetupPlan, error) {
	role := opts.Role
	var p SetupPlan
	var version int
	var keepSize string
	r, err := f.setupResolve(ctx, &p, &version, &keepSize)
	if err != nil {
		return p, err
	}
	c, err := f.setupCatalog(ctx, r, version)
	if err != nil {
		return p, err
	}
	ti := c.ident
	// The identity comes first: a publication of updates created before it
	// would make the application's UPDATEs fail in between.
	if err := f.chooseIdentity(&p, opts, ti, r); err != nil {
		return p, err
	}
	planPublication(&p, r, c, opts.Identity == IdentityInsertsOnly)
	if role != "" {
		if err := f.planRole(ctx, &p, role, r); err != nil {
			return p, err
		}
	}
	if opts.Identity == IdentityIndex {
		p.Notes = append(p.Notes, "replica identity set to an index: deletes and key updates carry the old key only when that index is the key column's own")
	} else if opts.Identity == IdentityInsertsOnly || ti.insertOnly && opts.Identity == IdentityUnchanged {
		p.Notes = append(p.Notes, "the publication carries inserts and truncates only: deletes cost a false positive each "+
			"until the next rebuild (set a RebuildInterval), and an UPDATE of the key is missed until then: "+
			"the application must never update "+f.cfg.Column)
	} else if err := f.planIdentity(&p, identAfter(ti.ident, opts.Identity), r, c); err != nil {
		return p, err
	}
	if keepSize == "-1" {
		p.Notes = append(p.Notes, "max_slot_wal_keep_size is unlimited: a slot nobody reads keeps WAL until the disk fills. "+
			"Cap it (the feed then reports ErrSlotLost and the gate rebuilds): ALTER SYSTEM SET max_slot_wal_keep_size = '10GB'; SELECT pg_reload_conf();")
	}
	return p, nil
}

// setupResolve reads the server's settings and resolves the table, in one
// round trip.
func (f *Feed) setupResolve(ctx context.Context, p *SetupPlan, version *int, keepSize *string) (*resolved, error) {
	if f.closed.Load() {
		return nil, ErrClosed
	}
	qctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue("SELECT current_setting('wal_level'), current_setting('server_version_num')::int, current_setting('max_slot_wal_keep_size')")
	b.Queue(resolveSQL, f.cfg.Table)
	br := f.pool.SendBatch(qctx, b)
	defer br.Close()
	if err := br.QueryRow().Scan(&p.WALLevel, version, keepSize); err != nil {
		return nil, f.wrap(ctx, qctx, "setup: settings", err)
	}
	r := &resolved{}
	err := br.QueryRow().Scan(&r.oid, &r.schema, &r.name)
	if err == nil {
		err = br.Close()
	}
	if !errors.Is(err, pgx.ErrNoRows) {
		err = f.wrap(ctx, qctx, "resolve table "+f.cfg.Table, err)
	}
	return f.resolved(ctx, r, err)
}

// catalog is what Setup reads about the table and the publication.
type catalog struct {
	ident tableIdentity
	// The publication: whether it exists and publishes updates or
	// deletes, and the rows of pg_publication_tables for the table and
	// whether any of them filters rows or columns.
	pubExists, pubChanges bool
	pubTables             int
	pubFiltered           bool
	// A partitioned table's changes reach the feed under its own name
	// only through a publication with publish_via_partition_root; member
	// is whether the publication has the table (pg_publication_tables
	// lists its partitions instead without the option: any of the tree
	// listed counts).
	partitioned, pubViaRoot, pubMember bool
	// The key column (keyFound false: the table has none of its name):
	// whether the replica identity covers it, whether it is NOT NULL,
	// and a unique index on it alone (nil: none).
	keyFound, keyCovered, keyNotNull bool
	keyIndex                         *string
}

// setupCatalog reads the table's replica identity, its candidate indexes,
// the publication and the key column, in one round trip.
func (f *Feed) setupCatalog(ctx context.Context, r *resolved, version int) (catalog, error) {
	var c catalog
	qctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	b := &pgx.Batch{}
	b.Queue(`SELECT c.relreplident::text,
		c.relreplident = 'f' OR EXISTS (SELECT 1 FROM pg_index i WHERE i.indrelid = c.oid
			AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))),
		coalesce((SELECT NOT (p.pubupdate OR p.pubdelete) FROM pg_publication p WHERE p.pubname = $2), false),
		c.relkind = 'p',
		c.relkind = 'p' AND EXISTS (SELECT 1 FROM pg_publication_tables pt
			JOIN pg_namespace n ON n.nspname = pt.schemaname JOIN pg_class k ON k.relnamespace = n.oid AND k.relname = pt.tablename
			WHERE pt.pubname = $2 AND k.oid IN (SELECT relid FROM pg_partition_tree(c.oid)))
		FROM pg_class c WHERE c.oid = $1`, r.oid, r.pub)
	b.Queue(`SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attname = $2
		WHERE i.indrelid = $1 AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL AND i.indimmediate
		AND NOT EXISTS (SELECT 1 FROM pg_attribute x WHERE x.attrelid = i.indrelid AND x.attnum = ANY(i.indkey::int2[]) AND NOT x.attnotnull)
		ORDER BY coalesce(i.indnkeyatts = 1 AND i.indkey[0] = a.attnum, false) DESC, ic.relname`, r.oid, f.cfg.Column)
	if version >= 130000 {
		b.Queue("SELECT count(*) > 0, coalesce(bool_or(pubupdate OR pubdelete), false), coalesce(bool_or(pubviaroot), false) FROM pg_publication WHERE pubname = $1", r.pub)
	} else {
		b.Queue("SELECT count(*) > 0, coalesce(bool_or(pubupdate OR pubdelete), false), false FROM pg_publication WHERE pubname = $1", r.pub)
	}
	if version >= 150000 {
		b.Queue(`SELECT count(*), coalesce(bool_or(rowfilter IS NOT NULL OR NOT ($4 = ANY(attnames))), false) FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, r.pub, r.schema, r.name, f.cfg.Column)
	} else {
		b.Queue(`SELECT count(*), bool_or(false) FROM pg_publication_tables
		WHERE pubname = $1 AND schemaname = $2 AND tablename = $3`, r.pub, r.schema, r.name)
	}
	b.Queue(`SELECT
		coalesce((SELECT a.attnum = ANY(i.indkey::int2[]) FROM pg_index i
			WHERE i.indrelid = c.oid AND ((c.relreplident = 'd' AND i.indisprimary) OR (c.relreplident = 'i' AND i.indisreplident))), false),
		a.attnotnull,
		(SELECT ic.relname FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
			WHERE i.indrelid = c.oid AND i.indisunique AND i.indpred IS NULL AND i.indexprs IS NULL
			AND i.indnkeyatts = 1 AND i.indkey[0] = a.attnum AND i.indimmediate ORDER BY 1 LIMIT 1)
		FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = $2 AND NOT a.attisdropped
		WHERE c.oid = $1`, r.oid, f.cfg.Column)
	br := f.pool.SendBatch(qctx, b)
	defer br.Close()
	ti := &c.ident
	if err := br.QueryRow().Scan(&ti.ident, &ti.usable, &ti.insertOnly, &c.partitioned, &c.pubMember); err != nil {
		return c, f.wrap(ctx, qctx, "setup: replica identity", err)
	}
	rows, err := br.Query()
	if err == nil {
		ti.candidates, err = pgx.CollectRows(rows, pgx.RowTo[string])
	}
	if err != nil {
		return c, f.wrap(ctx, qctx, "setup: indexes", err)
	}
	if err := br.QueryRow().Scan(&c.pubExists, &c.pubChanges, &c.pubViaRoot); err != nil {
		return c, f.wrap(ctx, qctx, "setup: publication", err)
	}
	if err := br.QueryRow().Scan(&c.pubTables, &c.pubFiltered); err != nil {
		return c, f.wrap(ctx, qctx, "setup: publication tables", err)
	}
	err = br.QueryRow().Scan(&c.keyCovered, &c.keyNotNull, &c.keyIndex)
	c.keyFound = err == nil
	if errors.Is(err, pgx.ErrNoRows) {
		err = nil
	}
	if err == nil {
		err = br.Close()
	}
	return c, f.wrap(ctx, qctx, "setup: key column", err)
}

// chooseIdentity adds the statements the operator's identity choice needs,
// or refuses when the table cannot carry updates and no choice was made.
func (f *Feed) chooseIdentity(p *SetupPlan, opts SetupOptions, ti tableIdentity, r *resolved) error {
	switch opts.Identity {
	case IdentityUnchanged:
		if ti.usable || ti.insertOnly {
			return nil
		}
		idx := "CREATE UNIQUE INDEX ON " + r.table + " (…) over NOT NULL columns, then ALTER TABLE " + r.table + " REPLICA IDENTITY USING INDEX <it>"
		if len(ti.candidates) > 0 {
			idx = "ALTER TABLE " + r.table + " REPLICA IDENTITY USING INDEX " + pgx.Identifier{ti.candidates[0]}.Sanitize()
		}
		return fmt.Errorf("%w: %s has no primary key and no replica identity index (relreplident %q), so once a publication "+
			"publishes its updates and deletes PostgreSQL refuses the application's UPDATE and DELETE. Pick one: "+
			"(1) a unique index as the identity: %s (`feed setup -identity index[=NAME]`); "+
			"(2) ALTER TABLE %s REPLICA IDENTITY FULL, more WAL per update and delete (`-identity full`); "+
			"(3) a publication WITH (publish = 'insert, truncate'): deletes and key updates are not seen until a rebuild, "+
			"for a table whose key is never updated (`-identity inserts`)",
			ErrReplicaIdentity, r.table, ti.ident, idx, r.table)
	case IdentityFull:
		if ti.ident != "f" {
			p.Statements = append(p.Statements, "ALTER TABLE "+r.table+" REPLICA IDENTITY FULL")
		}
	case IdentityIndex:
		name := opts.Index
		if name == "" {
			if len(ti.candidates) == 0 {
				return fmt.Errorf("%w: %s has no unique, non-partial index on NOT NULL columns to use as its identity: "+
					"create one, or pick -identity full or -identity inserts", ErrReplicaIdentity, r.table)
			}
			name = ti.candidates[0]
		} else if !slices.Contains(ti.candidates, name) {
			return fmt.Errorf("%w: index %q of %s cannot be the replica identity (it must be unique, non-partial, "+
				"without expressions, on NOT NULL columns); candidates: %q", ErrReplicaIdentity, name, r.table, ti.candidates)
		}
		p.Statements = append(p.Statements, "ALTER TABLE "+r.table+" REPLICA IDENTITY USING INDEX "+pgx.Identifier{name}.Sanitize())
	case IdentityInsertsOnly:
	default:
		return fmt.Errorf("postgres: setup: unknown identity choice %v", opts.Identity)
	}
	return nil
}

// identAfter is the table's relreplident once the choice is applied.
func identAfter(ident string, choice Identity) string {
	switch choice {
	case IdentityFull:
		return "f"
	case IdentityIndex:
		return "i"
	}
	return ident
}

func planPublication(p *SetupPlan, r *resolved, c catalog, insertsOnly bool) {
	table, pub := r.table, pgx.Identifier{r.pub}.Sanitize()
	const insertsOnlyOpt = " WITH (publish = 'insert, truncate')"
	const viaRoot = "publish_via_partition_root = true"
	if !c.pubExists {
		stmt := "CREATE PUBLICATION " + pub + " FOR TABLE " + table
		switch {
		case insertsOnly && c.partitioned:
			stmt += " WITH (publish = 'insert, truncate', " + viaRoot + ")"
		case insertsOnly:
			stmt += insertsOnlyOpt
		case c.partitioned:
			stmt += " WITH (" + viaRoot + ")"
		}
		p.Statements = append(p.Statements, stmt)
		return
	}
	if insertsOnly && c.pubChanges {
		p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" SET"+insertsOnlyOpt[5:])
	}
	if c.partitioned {
		// Its changes are published under the partitions' names without
		// the option, and pg_publication_tables lists those.
		if !c.pubViaRoot {
			p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" SET ("+viaRoot+")")
		}
		if !c.pubMember {
			p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" ADD TABLE "+table)
		} else if c.pubFiltered {
			p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" SET TABLE "+table)
		}
		return
	}
	switch {
	case c.pubTables == 0:
		p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" ADD TABLE "+table)
	case c.pubFiltered:
		// SET TABLE without WHERE or a column list drops both. A row filter
		// on updates can make the application's UPDATEs fail, and one
		// hiding rows would hide keys.
		p.Statements = append(p.Statements, "ALTER PUBLICATION "+pub+" SET TABLE "+table)
	}
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
func (f *Feed) planIdentity(p *SetupPlan, ident string, r *resolved, c catalog) error {
	table := r.table
	covered, notNull, index := c.keyCovered, c.keyNotNull, c.keyIndex
	if !c.keyFound {
		return fmt.Errorf("%w: column %q not in %s", ErrKeyColumn, f.cfg.Column, r.table)
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
// It never changes wal_level; it changes the replica identity only as
// SetupOptions.Identity chose. Each statement runs in a transaction of its
// own with lock_timeout set to the feed's Timeout: ALTER TABLE queued behind
// a long transaction would otherwise block the application's queries on the
// table until it got its lock.
func (f *Feed) ApplySetup(ctx context.Context, plan SetupPlan) error {
	lockTimeout := fmt.Sprintf("SET LOCAL lock_timeout = %d", f.cfg.Timeout.Milliseconds())
	for _, s := range plan.Statements {
		err := pgx.BeginFunc(ctx, f.pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, lockTimeout); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, s)
			return err
		})
		if err != nil {
			return classify("setup: "+s, err)
		}
	}
	return nil
}
