package postgres_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
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
	return setupFixtureOn(t, testsvc.LogicalPostgres(t).DSN, create)
}

func setupFixtureOn(t *testing.T, url, create string) *setupFixture {
	t.Helper()
	pool, schema := schemaOn(t, url)
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
	t.Parallel() // no open transaction that would hold up the others' slot creation
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
	t.Parallel() // no open transaction that would hold up the others' slot creation
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

// appWrites runs the application's kinds of write on the table and fails the
// test if PostgreSQL refuses one.
func (fx *setupFixture) appWrites(t *testing.T, tag string) {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{
		"INSERT INTO " + fx.table + " (email, note) VALUES ('" + tag + "-a@x', 'n'), ('" + tag + "-b@x', 'n')",
		"UPDATE " + fx.table + " SET note = 'updated' WHERE email = '" + tag + "-a@x'",
		"UPDATE " + fx.table + " SET email = '" + tag + "-c@x' WHERE email = '" + tag + "-a@x'",
		"DELETE FROM " + fx.table + " WHERE email = '" + tag + "-b@x'",
	} {
		if _, err := fx.pool.Exec(ctx, q); err != nil {
			t.Fatalf("the application's write failed after setup: %s: %v", q, err)
		}
	}
}

// TestSetupKeepsAppWrites: on a table without a usable replica identity,
// setup never makes PostgreSQL refuse the application's UPDATE and DELETE.
// Without a choice it refuses with ErrReplicaIdentity and explains the
// options; with one it applies exactly that, and the feed works. Before,
// setup created a publication of updates and deletes, and every UPDATE
// failed with "cannot update table ... does not have a replica identity".
func TestSetupKeepsAppWrites(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	for _, tc := range []struct {
		name, create string
		opts         postgres.SetupOptions
		deletes      bool // the feed reports deletes with their key
	}{
		{"no choice", "(email text, note text)", postgres.SetupOptions{}, false},
		{"full", "(email text, note text)", postgres.SetupOptions{Identity: postgres.IdentityFull}, true},
		{"index", "(email text NOT NULL UNIQUE, note text)", postgres.SetupOptions{Identity: postgres.IdentityIndex}, true},
		{"inserts only", "(email text, note text)", postgres.SetupOptions{Identity: postgres.IdentityInsertsOnly}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fx := newSetupFixture(t, tc.create)
			fx.appWrites(t, "before")
			tc.opts.Role = fx.role
			f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: fx.pool.Config().ConnString(), Table: fx.table, Column: "email"})
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			ctx := context.Background()
			plan, err := f.Setup(ctx, tc.opts)
			if tc.opts.Identity == postgres.IdentityUnchanged {
				if err == nil {
					if aerr := f.ApplySetup(ctx, plan); aerr != nil {
						t.Fatal(aerr)
					}
					fx.appWrites(t, "after")
				}
				if !errors.Is(err, postgres.ErrReplicaIdentity) || !errors.Is(err, changefeed.ErrSetup) {
					t.Fatalf("setup without a choice: %v, want ErrReplicaIdentity", err)
				}
				for _, choice := range []string{"REPLICA IDENTITY FULL", "USING INDEX", "publish = 'insert, truncate'"} {
					if !strings.Contains(err.Error(), choice) {
						t.Errorf("the refusal does not explain %q: %v", choice, err)
					}
				}
				fx.appWrites(t, "after")
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := f.ApplySetup(ctx, plan); err != nil {
				t.Fatal(err)
			}
			fx.appWrites(t, "after")

			feed, err := postgres.NewFeed(postgres.FeedConfig{ConnString: fx.connString(t, fx.role), Table: fx.table, Column: "email",
				StatusInterval: 50 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			defer feed.Close()
			c := newConsumer()
			pos, err := feed.Bootstrap(ctx, c.add)
			if err != nil {
				t.Fatal(err)
			}
			stop := c.stream(feed, pos)
			defer stop()
			fx.appWrites(t, "streamed")
			h, err := feed.Head(ctx)
			if err != nil {
				t.Fatal(err)
			}
			c.waitFor(t, h)
			c.mu.Lock()
			defer c.mu.Unlock()
			want := map[string]int{"streamed-a@x": 1, "streamed-b@x": 1} // inserts only: updates and deletes unseen
			if tc.deletes {
				want = map[string]int{"streamed-a@x": 0, "streamed-b@x": 0, "streamed-c@x": 1}
			}
			for k, n := range want {
				if c.keys[k] != n {
					t.Errorf("%s counted %d times, want %d (keys %v)", k, c.keys[k], n, c.keys)
				}
			}
		})
	}
}

// TestSetupNotesKeyNotInIdentity: the README's quick-start table, keyed by
// an id primary key with a unique email, gets the note that deletes and
// key updates are unknown deletes, and the statements that make them exact.
func TestSetupNotesKeyNotInIdentity(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newSetupFixture(t, "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE)")
	plan := fx.setup(t, fx.table, postgres.SetupOptions{})
	notes := strings.Join(plan.Notes, "\n")
	for _, want := range []string{
		"replica identity does not include email", "counts an unknown delete toward the rebuild trigger",
		`ALTER "email" SET NOT NULL`, "REPLICA IDENTITY USING INDEX",
	} {
		if !strings.Contains(notes, want) {
			t.Errorf("setup's notes lack %q:\n%s", want, notes)
		}
	}
}

// TestSetupRoundTrips: Setup's checks (a server start waits on them) take
// two round trips on a connected feed — the settings with the table's
// lookup, then the table, its indexes, the publication and the key column
// — counted at a relay between the feed and the server as the times the
// client speaks again after the server answered.
func TestSetupRoundTrips(t *testing.T) {
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE trips (email text PRIMARY KEY)", "CREATE PUBLICATION trips_pub FOR TABLE trips")
	relay := newTurnRelay(t, net.JoinHostPort(pg.Host, strconv.Itoa(pg.Port)))
	u, err := url.Parse(pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	u.Host = relay.addr
	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: u.String(), Table: "trips", Column: "email", Publication: "trips_pub"})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	plan, err := f.Setup(ctx, postgres.SetupOptions{}) // connects
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.Statements) != 0 || plan.WALLevel != "logical" {
		t.Fatalf("plan %+v: want nothing to do", plan)
	}
	before := relay.turns.Load()
	if _, err := f.Setup(ctx, postgres.SetupOptions{}); err != nil {
		t.Fatal(err)
	}
	if n := relay.turns.Load() - before; n != 2 {
		t.Errorf("Setup took %d round trips, want 2", n)
	}
}

// turnRelay relays TCP connections to a server and counts turns: the
// client sending after the server last sent.
type turnRelay struct {
	addr  string
	turns atomic.Int64
}

func newTurnRelay(t *testing.T, server string) *turnRelay {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	r := &turnRelay{addr: ln.Addr().String()}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", server)
			if err != nil {
				c.Close()
				continue
			}
			t.Cleanup(func() { c.Close(); s.Close() })
			var serverSpoke atomic.Bool
			serverSpoke.Store(true) // the client's first message is a turn
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := c.Read(buf)
					if n > 0 {
						if serverSpoke.Swap(false) {
							r.turns.Add(1)
						}
						s.Write(buf[:n])
					}
					if err != nil {
						s.Close()
						return
					}
				}
			}()
			go func() {
				buf := make([]byte, 64<<10)
				for {
					n, err := s.Read(buf)
					if n > 0 {
						serverSpoke.Store(true)
						c.Write(buf[:n])
					}
					if err != nil {
						c.Close()
						return
					}
				}
			}()
		}
	}()
	return r
}
