package postgres_test

import (
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/source/postgres"
)

// setupFixture is a table with no publication and no slot yet: what a DBA
// starts from before `bloomgate feed setup`. The role, publication and every
// slot named after the schema are dropped when the test ends.
type setupFixture struct {
	pool   *pgxpool.Pool
	schema string
	table  string
	role   string
}

func newSetupFixture(t *testing.T, create string) *setupFixture {
	t.Helper()
	pool, schema := testDB(t)
	fx := &setupFixture{pool: pool, schema: schema, table: schema + ".users", role: schema + "_feed"}
	ctx := context.Background()
	if _, err := pool.Exec(ctx, "CREATE TABLE "+fx.table+" "+create); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		for range 100 {
			var left int
			pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name LIKE 'bloomgate_'||$1||'%' AND active_pid IS NOT NULL", schema)
			pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name LIKE 'bloomgate_'||$1||'%' AND NOT active", schema)
			if err := pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'bloomgate_'||$1||'%'", schema).Scan(&left); err == nil && left == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", fx.role)
		pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+postgres.DefaultName(fx.table, "email"))
		pool.Exec(ctx, "DROP OWNED BY "+fx.role)
		pool.Exec(ctx, "DROP ROLE IF EXISTS "+fx.role)
	})
	return fx
}

// connString returns the superuser's connection string with another user.
func (fx *setupFixture) connString(t *testing.T, user string) string {
	t.Helper()
	u, err := url.Parse(fx.pool.Config().ConnString())
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.User(user)
	return u.String()
}

// setup runs the setup plan as the superuser, as `bloomgate feed setup -run`
// does, and returns it.
func (fx *setupFixture) setup(t *testing.T, table string, opts postgres.SetupOptions) postgres.SetupPlan {
	t.Helper()
	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: fx.pool.Config().ConnString(), Table: table, Column: "email"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	plan, err := f.Setup(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.ApplySetup(ctx, plan); err != nil {
		t.Fatal(err)
	}
	return plan
}

// TestSetupRoleFollows: the role `feed setup -run` creates (LOGIN
// REPLICATION, USAGE on the schema, SELECT on the table, nothing more)
// bootstraps, streams, and reads the slot's status and the WAL head.
// Before the publication check stopped casting through regclass, Bootstrap
// failed with "permission denied for schema pg_toast".
func TestSetupRoleFollows(t *testing.T) {
	fx := newSetupFixture(t, "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE)")
	fx.setup(t, fx.table, postgres.SetupOptions{Role: fx.role})
	ctx := context.Background()
	if _, err := fx.pool.Exec(ctx, "INSERT INTO "+fx.table+" (email) VALUES ('before@x')"); err != nil {
		t.Fatal(err)
	}
	var super bool
	if err := fx.pool.QueryRow(ctx, "SELECT rolsuper FROM pg_roles WHERE rolname = $1", fx.role).Scan(&super); err != nil || super {
		t.Fatalf("the setup role is a superuser (%v) or missing (%v)", super, err)
	}

	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: fx.connString(t, fx.role), Table: fx.table, Column: "email",
		StatusInterval: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := newConsumer()
	pos, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatalf("bootstrap as the setup role: %v", err)
	}
	stop := c.stream(f, pos)
	if _, err := fx.pool.Exec(ctx, "INSERT INTO "+fx.table+" (email) VALUES ('after@x')"); err != nil {
		t.Fatal(err)
	}
	h, err := f.Head(ctx)
	if err != nil {
		t.Fatalf("head as the setup role: %v", err)
	}
	c.waitFor(t, h)
	if err := stop(); err != nil {
		t.Fatalf("stream as the setup role: %v", err)
	}
	c.mu.Lock()
	got := len(c.keys)
	c.mu.Unlock()
	if got != 2 {
		t.Fatalf("the setup role's feed saw %d keys, want 2", got)
	}
	st, err := f.SlotStatus(ctx)
	if err != nil || !st.Exists {
		t.Fatalf("slot status as the setup role: %+v, %v", st, err)
	}
	if _, err := f.Rebuild(ctx, func([]byte) error { return nil }); err != nil {
		t.Fatalf("rebuild as the setup role: %v", err)
	}
}

// TestNamesMeet: setup with the schema-qualified table and a feed given the
// table as the application spells it (unqualified, found on the
// search_path) use one slot and one publication. Before names were derived
// from the resolved table, the feed looked for bloomgate_users_email while
// setup had made bloomgate_<schema>_users_email, and never became ready.
func TestNamesMeet(t *testing.T) {
	fx := newSetupFixture(t, "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE)")
	fx.setup(t, fx.table, postgres.SetupOptions{Role: fx.role})
	u, err := url.Parse(fx.connString(t, fx.role))
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set("search_path", fx.schema)
	u.RawQuery = q.Encode()
	ctx := context.Background()
	for _, spelling := range []string{"users", fx.schema + ".users", "USERS"} {
		f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: u.String(), Table: spelling, Column: "email"})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := f.Bootstrap(ctx, func([]byte) error { return nil }); err != nil {
			t.Fatalf("%q: %v", spelling, err)
		}
		want := postgres.DefaultName(fx.schema+".users", "email")
		if f.Slot() != want || f.Publication() != want {
			t.Errorf("%q: slot %q, publication %q; want %q", spelling, f.Slot(), f.Publication(), want)
		}
		f.Close()
	}
}
