package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// feedFixture is a users table with its own publication and slot (named
// after the test's schema); the database holding them is dropped, slots and
// all, when the test ends, even on failure.
type feedFixture struct {
	pool  *pgxpool.Pool
	table string
	name  string // slot and publication
	cfg   postgres.FeedConfig
}

// newFeedFixture makes the fixture in a fresh database of the test binary's
// private cluster with wal_level=logical.
func newFeedFixture(t testing.TB, identity string) *feedFixture {
	t.Helper()
	return feedFixtureOn(t, testsvc.LogicalPostgres(t).DSN, identity)
}

func feedFixtureOn(t testing.TB, url, identity string) *feedFixture {
	t.Helper()
	pool, schema := schemaOn(t, url)
	ctx := context.Background()
	fx := &feedFixture{pool: pool, table: schema + ".users", name: schema}
	for _, q := range []string{
		"CREATE TABLE " + fx.table + " (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE, note text)",
		"CREATE PUBLICATION " + fx.name + " FOR TABLE " + fx.table,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	if identity == "USING INDEX users_email_key" { // an identity index needs NOT NULL columns
		if _, err := pool.Exec(ctx, "ALTER TABLE "+fx.table+" ALTER email SET NOT NULL"); err != nil {
			t.Fatal(err)
		}
	}
	if identity != "" {
		if _, err := pool.Exec(ctx, "ALTER TABLE "+fx.table+" REPLICA IDENTITY "+identity); err != nil {
			t.Fatal(err)
		}
	}
	fx.cfg = postgres.FeedConfig{
		ConnString:     pool.Config().ConnString(),
		Table:          fx.table,
		Column:         "email",
		Slot:           fx.name,
		Publication:    fx.name,
		StatusInterval: 50 * time.Millisecond,
		MaxBackoff:     200 * time.Millisecond,
	}
	return fx
}

func (fx *feedFixture) feed(t testing.TB) *postgres.Feed {
	t.Helper()
	f, err := postgres.NewFeed(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func (fx *feedFixture) exec(t testing.TB, q string, args ...any) {
	t.Helper()
	if _, err := fx.pool.Exec(context.Background(), q, args...); err != nil {
		t.Fatalf("%s: %v", q, err)
	}
}

// tableKeys returns the table's non-NULL keys.
func (fx *feedFixture) tableKeys(t *testing.T) map[string]int {
	t.Helper()
	rows, err := fx.pool.Query(context.Background(), "SELECT email FROM "+fx.table+" WHERE email IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	m := map[string]int{}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		m[s]++
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return m
}

func (fx *feedFixture) walEnd(t testing.TB) changefeed.Position {
	t.Helper()
	var s string
	if err := fx.pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	p, err := postgres.ParseLSN(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// consumer applies a feed into an exact multiset of keys.
type consumer struct {
	mu      sync.Mutex
	keys    map[string]int
	txns    []changefeed.Txn // every delivered Txn, in order
	last    changefeed.Position
	unknown int
	done    bool
	err     error
	onTxn   func(changefeed.Txn) // called under mu after applying
}

func newConsumer() *consumer {
	return &consumer{keys: map[string]int{}}
}

func (c *consumer) add(k []byte) error {
	c.mu.Lock()
	c.keys[string(k)]++
	c.mu.Unlock()
	return nil
}

func (c *consumer) apply(t changefeed.Txn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.End <= c.last {
		return fmt.Errorf("position went backwards: %s after %s", t.End, c.last)
	}
	for _, ch := range t.Changes {
		switch ch.Kind {
		case changefeed.Insert:
			c.keys[string(ch.Key)]++
		case changefeed.Delete:
			c.keys[string(ch.Key)]--
			if c.keys[string(ch.Key)] == 0 {
				delete(c.keys, string(ch.Key))
			}
		default:
			c.unknown++
		}
	}
	c.txns = append(c.txns, t)
	c.last = t.End
	if c.onTxn != nil {
		c.onTxn(t)
	}
	return nil
}

// stream runs f.Stream in the background; stop cancels it and returns its
// error.
func (c *consumer) stream(f *postgres.Feed, from changefeed.Position) (stop func() error) {
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		err := f.Stream(ctx, from, c.apply)
		c.mu.Lock()
		c.done, c.err = true, err
		c.mu.Unlock()
		errc <- err
	}()
	return func() error {
		cancel()
		err := <-errc
		if errors.Is(err, context.Canceled) {
			return nil
		}
		return err
	}
}

// waitFor waits until a Txn at or beyond p was applied, or Stream ended.
func (c *consumer) waitFor(t *testing.T, p changefeed.Position) {
	t.Helper()
	testsvc.Eventually(t, waitLimit, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.last >= p || c.done
	}, "the feed did not apply %s", p)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last < p {
		t.Fatalf("stream ended at %s before %s: %v", c.last, p, c.err)
	}
}

// waitEnd waits until Stream has ended and returns its error.
func (c *consumer) waitEnd(t *testing.T) error {
	t.Helper()
	testsvc.Eventually(t, waitLimit, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.done
	}, "Stream still running")
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// waitLimit bounds every wait of these tests: far above what any takes on a
// loaded machine, so reaching it means something hangs.
const waitLimit = 2 * time.Minute

// checkExact compares the consumer's multiset with the table: every key
// exactly once, nothing else.
func checkExact(t *testing.T, c *consumer, table map[string]int) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	var missing, extra, twice []string
	for k := range table {
		if c.keys[k] == 0 {
			missing = append(missing, k)
		}
	}
	for k, n := range c.keys {
		switch {
		case table[k] == 0:
			extra = append(extra, k)
		case n != 1:
			twice = append(twice, fmt.Sprintf("%s×%d", k, n))
		}
	}
	if len(missing)+len(extra)+len(twice) > 0 {
		t.Fatalf("feed ≠ table (%d keys): missing %d %.5q, extra %d %.5q, counted twice or negative %d %.5q",
			len(table), len(missing), missing, len(extra), extra, len(twice), twice)
	}
}

// writer runs a random mix of single- and multi-statement transactions:
// inserts, updates of the key and of another column, deletes.
func writer(ctx context.Context, pool *pgxpool.Pool, table string, id int, stop <-chan struct{}) error {
	r := rand.New(rand.NewPCG(uint64(id), 7))
	for n := 0; ; n++ {
		select {
		case <-stop:
			return nil
		default:
		}
		if err := writeTxn(ctx, pool, table, id, n, r); err != nil && !isConflict(err) {
			return err
		}
	}
}

func writeTxn(ctx context.Context, pool *pgxpool.Pool, table string, id, n int, r *rand.Rand) error {
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	for range 1 + r.IntN(3) {
		var q string
		switch x := r.IntN(10); {
		case x < 6:
			q = fmt.Sprintf("INSERT INTO %s (email) VALUES ('w%d-%d-%d@x')", table, id, n, r.Uint32())
		case x < 7:
			q = fmt.Sprintf("UPDATE %s SET email = email || '.u' WHERE id = (SELECT max(id) - %d FROM %s)", table, r.IntN(20), table)
		case x < 8:
			q = fmt.Sprintf("UPDATE %s SET note = 'n' WHERE id = (SELECT max(id) - %d FROM %s)", table, r.IntN(20), table)
		default:
			q = fmt.Sprintf("DELETE FROM %s WHERE id = (SELECT max(id) - %d FROM %s)", table, r.IntN(20), table)
		}
		if _, err := tx.Exec(ctx, q); err != nil {
			return err
		}
	}
	if r.IntN(10) == 0 {
		return tx.Rollback(ctx) // rolled back: must never show up
	}
	return tx.Commit(ctx)
}

// isConflict: two writers racing on one e-mail or row.
func isConflict(err error) bool {
	var pg *pgconn.PgError
	return errors.As(err, &pg) && (pg.Code == "23505" || pg.Code == "40P01")
}

// startWriters runs n writers until the returned stop is called.
func startWriters(t *testing.T, fx *feedFixture, n int) (stop func()) {
	t.Helper()
	ch := make(chan struct{})
	var wg sync.WaitGroup
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { errs[i] = writer(context.Background(), fx.pool, fx.table, i, ch) })
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			close(ch)
			wg.Wait()
			for _, err := range errs {
				if err != nil {
					t.Errorf("writer: %v", err)
				}
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitRows blocks until the table has grown by n rows (a progress point for
// the writers, not a timing assumption).
func waitRows(t *testing.T, fx *feedFixture, n int64) {
	t.Helper()
	var start int64
	fx.pool.QueryRow(context.Background(), "SELECT coalesce(max(id), 0) FROM "+fx.table).Scan(&start)
	testsvc.Eventually(t, waitLimit, func() bool {
		var cur int64
		if err := fx.pool.QueryRow(context.Background(), "SELECT coalesce(max(id), 0) FROM "+fx.table).Scan(&cur); err != nil {
			t.Fatal(err)
		}
		return cur >= start+n
	}, "the writers did not add %d rows", n)
}

// TestFeedBootstrapExact: writers run before, during and after the
// bootstrap (one transaction stays open across slot creation), and the
// walsender is killed once mid-stream. Bootstrap's keys plus the streamed
// changes equal the table: nothing missing, nothing applied twice.
func TestFeedBootstrapExact(t *testing.T) {
	t.Parallel() // a cluster of its own: its open transaction holds up no other test's slot creation
	dsn := testsvc.NewPostgres(t, testsvc.PGOptions{}).DSN
	for _, identity := range []string{"USING INDEX users_email_key", "FULL"} {
		t.Run(identity, func(t *testing.T) {
			fx := feedFixtureOn(t, dsn, identity)
			ctx := context.Background()
			stopWriters := startWriters(t, fx, 3)
			waitRows(t, fx, 200)

			long, err := fx.pool.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := long.Exec(ctx, "INSERT INTO "+fx.table+" (email) VALUES ('long-txn@x')"); err != nil {
				t.Fatal(err)
			}
			f := fx.feed(t)
			c := newConsumer()
			type result struct {
				p   changefeed.Position
				err error
			}
			res := make(chan result, 1)
			go func() {
				p, err := f.Bootstrap(ctx, c.add)
				res <- result{p, err}
			}()
			waitRows(t, fx, 100) // the slot creation waits for the open transaction meanwhile
			if err := long.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			r := <-res
			if r.err != nil {
				t.Fatal(r.err)
			}
			stop := c.stream(f, r.p)
			waitRows(t, fx, 300)

			// Kill the walsender: the feed reconnects and resumes exactly. Until
			// the feed has reconnected, kill it again: the first kill may come
			// before the walsender has taken the slot.
			testsvc.Eventually(t, waitLimit, func() bool {
				if f.Health().Reconnects > 0 {
					return true
				}
				fx.exec(t, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", fx.name)
				waitRows(t, fx, 10)
				return f.Health().Reconnects > 0
			}, "the feed did not reconnect after its walsender was terminated")
			waitRows(t, fx, 300)
			stopWriters()
			end := fx.walEnd(t)
			c.waitFor(t, end)
			if err := stop(); err != nil {
				t.Fatal(err)
			}
			checkExact(t, c, fx.tableKeys(t))
			if _, ok := c.keys["long-txn@x"]; !ok {
				t.Fatal("the transaction open across slot creation is missing")
			}
			t.Logf("%d keys, %d transactions streamed", len(c.keys), len(c.txns))
		})
	}
}

// TestFeedPoolParams: a ConnString with pgxpool's and pgx's own parameters
// (pool_max_conns, statement_cache_capacity) works for the replication
// connection too, which must not send them to the server as settings (it
// would refuse every connection: "unrecognized configuration parameter").
func TestFeedPoolParams(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "")
	fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'user'||g||'@example.com' FROM generate_series(1, 100) g")
	cfg := fx.cfg
	sep := "?"
	if strings.Contains(cfg.ConnString, "?") {
		sep = "&"
	}
	cfg.ConnString += sep + "pool_max_conns=1&statement_cache_capacity=64"
	f, err := postgres.NewFeed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c := newConsumer()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	p, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	stop := c.stream(f, p)
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('after@example.com')")
	c.waitFor(t, fx.walEnd(t))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	checkExact(t, c, fx.tableKeys(t))
}

// TestFeedResumeAfterKill: the consumer confirms a position it made durable,
// then dies without confirming later ones. A new process resumes from the
// durable position: no gap; the only repeats are transactions after it,
// delivered again with the same End and Changes.
func TestFeedResumeAfterKill(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "USING INDEX users_email_key")
	ctx := context.Background()
	stopWriters := startWriters(t, fx, 2)

	f1 := fx.feed(t)
	c1 := newConsumer()
	p0, err := f1.Bootstrap(ctx, c1.add)
	if err != nil {
		t.Fatal(err)
	}
	// The "durable snapshot": state and position, taken after some txns.
	var durable map[string]int
	var durablePos changefeed.Position
	c1.onTxn = func(tx changefeed.Txn) {
		if durable == nil && len(c1.txns) >= 50 && len(tx.Changes) > 0 {
			durable, durablePos = maps.Clone(c1.keys), tx.End
		}
	}
	stop1 := c1.stream(f1, p0)
	waitRows(t, fx, 200)
	c1.mu.Lock()
	snapPos := durablePos
	c1.mu.Unlock()
	for snapPos == 0 { // wait until the consumer has taken its snapshot
		waitRows(t, fx, 10)
		c1.mu.Lock()
		snapPos = durablePos
		c1.mu.Unlock()
	}
	if err := f1.Confirm(ctx, snapPos); err != nil {
		t.Fatal(err)
	}
	c1.mu.Lock()
	beyond := c1.last + 1<<40
	c1.mu.Unlock()
	if err := f1.Confirm(ctx, beyond); !errors.Is(err, postgres.ErrNotDelivered) {
		t.Fatalf("Confirm beyond delivery: %v, want ErrNotDelivered", err)
	}
	// Wait until the server has recorded the confirmation, then kill.
	testsvc.Eventually(t, waitLimit, func() bool {
		st, err := f1.SlotStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.ConfirmedFlush > snapPos {
			t.Fatalf("slot confirmed %s, consumer only %s", st.ConfirmedFlush, snapPos)
		}
		return st.ConfirmedFlush == snapPos
	}, "the server did not record the confirmation of %s", snapPos)
	if err := stop1(); err != nil {
		t.Fatal(err)
	}
	f1.Close()
	c1.mu.Lock()
	first := slices.Clone(c1.txns)
	c1.mu.Unlock()

	// Restart: a new Feed and consumer from the durable state.
	f2 := fx.feed(t)
	c2 := newConsumer()
	c2.keys = durable
	c2.last = snapPos
	stop2 := c2.stream(f2, snapPos)
	waitRows(t, fx, 200)
	stopWriters()
	c2.waitFor(t, fx.walEnd(t))
	if err := stop2(); err != nil {
		t.Fatal(err)
	}
	checkExact(t, c2, fx.tableKeys(t))

	// Redeliveries: exactly the first run's transactions after snapPos that
	// carry changes, identical. (Progress markers carry server positions that
	// need not repeat.)
	byEnd := map[changefeed.Position]changefeed.Txn{}
	for _, tx := range first {
		if len(tx.Changes) > 0 {
			byEnd[tx.End] = tx
		}
	}
	var redelivered int
	for _, tx := range c2.txns {
		if tx.End <= snapPos {
			t.Fatalf("txn %s at or before the resume point %s delivered again", tx.End, snapPos)
		}
		if old, ok := byEnd[tx.End]; ok {
			redelivered++
			if fmt.Sprint(old.Changes) != fmt.Sprint(tx.Changes) || old.Commit != tx.Commit {
				t.Fatalf("txn %s redelivered differently:\n%v\n%v", tx.End, old, tx)
			}
		}
	}
	var unconfirmed int
	for end := range byEnd {
		if end > snapPos {
			unconfirmed++
		}
	}
	if redelivered != unconfirmed {
		t.Fatalf("redelivered %d of the %d unconfirmed transactions", redelivered, unconfirmed)
	}
	t.Logf("resumed at %s: %d unconfirmed transactions redelivered identically", snapPos, redelivered)

	// Resuming from before the confirmed position is refused, not skipped.
	f3 := fx.feed(t)
	err = f3.Stream(ctx, p0, func(changefeed.Txn) error { return nil })
	if !errors.Is(err, postgres.ErrStalePosition) || !errors.Is(err, changefeed.ErrRebuild) {
		t.Fatalf("Stream from before confirmed_flush: %v, want ErrStalePosition", err)
	}
}

// TestFeedSlotLost: a slot dropped under a running Stream (its walsender
// killed first) ends the Stream with ErrSlotLost; so does starting one.
func TestFeedSlotLost(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "")
	ctx := context.Background()
	f := fx.feed(t)
	c := newConsumer()
	p, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	fx.exec(t, "INSERT INTO "+fx.table+" (email) VALUES ('a@x')")
	stop := c.stream(f, p)
	c.waitFor(t, fx.walEnd(t))
	testsvc.Eventually(t, waitLimit, func() bool {
		fx.exec(t, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", fx.name)
		var dropped int
		err := fx.pool.QueryRow(ctx, "SELECT count(pg_drop_replication_slot(slot_name)) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", fx.name).Scan(&dropped)
		return err == nil && dropped == 1
	}, "the slot was not dropped")
	err = c.waitEnd(t)
	stop()
	if !errors.Is(err, postgres.ErrSlotLost) || !errors.Is(err, changefeed.ErrRebuild) {
		t.Fatalf("Stream after the slot was dropped: %v, want ErrSlotLost", err)
	}
	if err := f.Stream(ctx, p, c.apply); !errors.Is(err, postgres.ErrSlotLost) {
		t.Fatalf("Stream on a missing slot: %v, want ErrSlotLost", err)
	}
	if h := f.Health(); h.Streaming || h.Connected {
		t.Fatalf("health after the stream ended: %+v", h)
	}
}

// TestFeedReplicaIdentity pins what each replica identity lets the feed
// see of updates and deletes.
func TestFeedReplicaIdentity(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	steps := []string{
		"INSERT INTO %s (email) VALUES ('a@x')",
		"UPDATE %s SET email = 'b@x'",
		"UPDATE %s SET note = 'n'",
		"UPDATE %s SET email = NULL",
		"UPDATE %s SET email = 'c@x'",
		"DELETE FROM %s",
		"INSERT INTO %s (email) VALUES ('d@x')",
		"TRUNCATE %s",
	}
	for _, tc := range []struct {
		identity string
		want     []string // per step; "-" skips it (NULL keys under an identity index)
	}{
		{"", []string{"[insert a@x]", "[unknown-delete insert b@x]", "[unknown-delete insert b@x]", "[unknown-delete]",
			"[unknown-delete insert c@x]", "[unknown-delete]", "[insert d@x]", "[truncate]"}},
		{"USING INDEX users_email_key", []string{"[insert a@x]", "[delete a@x insert b@x]", "[]", "-",
			"[delete b@x insert c@x]", "[delete c@x]", "[insert d@x]", "[truncate]"}},
		{"FULL", []string{"[insert a@x]", "[delete a@x insert b@x]", "[]", "[delete b@x]",
			"[insert c@x]", "[delete c@x]", "[insert d@x]", "[truncate]"}},
	} {
		t.Run("identity "+tc.identity, func(t *testing.T) {
			fx := newFeedFixture(t, tc.identity)
			ctx := context.Background()
			f := fx.feed(t)
			c := newConsumer()
			p, err := f.Bootstrap(ctx, c.add)
			if err != nil {
				t.Fatal(err)
			}
			stop := c.stream(f, p)
			defer stop()
			for i, step := range steps {
				if tc.want[i] == "-" {
					continue
				}
				q := fmt.Sprintf(step, fx.table)
				c.mu.Lock()
				n := len(c.txns)
				c.mu.Unlock()
				fx.exec(t, q)
				c.waitFor(t, fx.walEnd(t))
				c.mu.Lock()
				var got []string
				for _, tx := range c.txns[n:] {
					if len(tx.Changes) > 0 || tx.Commit != tx.End { // skip progress markers
						got = append(got, fmtChanges(tx.Changes))
					}
				}
				c.mu.Unlock()
				if len(got) != 1 || got[0] != tc.want[i] {
					t.Errorf("%s: got %q, want [%q]", q, got, tc.want[i])
				}
			}
		})
	}
}

func fmtChanges(cs []changefeed.Change) string {
	s := "["
	for i, c := range cs {
		if i > 0 {
			s += " "
		}
		s += c.Kind.String()
		if c.Key != nil {
			s += " " + string(c.Key)
		}
	}
	return s + "]"
}

// TestFeedRebuildWhileStreaming: a fresh generation from Rebuild's COPY,
// plus every streamed Txn with Commit >= its point, equals the table.
func TestFeedRebuildWhileStreaming(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "USING INDEX users_email_key")
	ctx := context.Background()
	stopWriters := startWriters(t, fx, 3)
	f := fx.feed(t)
	live := newConsumer()
	p, err := f.Bootstrap(ctx, live.add)
	if err != nil {
		t.Fatal(err)
	}
	stop := live.stream(f, p)
	waitRows(t, fx, 100)
	live.mu.Lock()
	before := len(live.txns)
	live.mu.Unlock()
	gen := newConsumer()
	point, err := f.Rebuild(ctx, gen.add)
	if err != nil {
		t.Fatal(err)
	}
	waitRows(t, fx, 100)
	stopWriters()
	live.waitFor(t, fx.walEnd(t))
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	var applied int
	for i, tx := range live.txns {
		if tx.Commit >= point {
			if i < before {
				t.Fatalf("txn %d (commit %s) delivered before Rebuild was called has Commit >= point %s", i, tx.Commit, point)
			}
			if err := gen.apply(tx); err != nil {
				t.Fatal(err)
			}
			applied++
		}
	}
	table := fx.tableKeys(t)
	checkExact(t, live, table)
	checkExact(t, gen, table)
	var temps int
	fx.pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '_rb%'", fx.name).Scan(&temps)
	if temps != 0 {
		t.Fatalf("%d temporary slots left after Rebuild", temps)
	}
	t.Logf("rebuilt %d keys, then %d streamed transactions at or after %s", len(table), applied, point)
}

// TestFeedSlotStatusAndHealth: the slot holds WAL until confirmed; Health
// reports CaughtUp once the stream has caught up.
func TestFeedSlotStatusAndHealth(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := newFeedFixture(t, "")
	ctx := context.Background()
	f := fx.feed(t)
	if h := f.Health(); h.Streaming || !h.CaughtUp.IsZero() {
		t.Fatalf("not streaming yet, want not streaming and never caught up: %+v", h)
	}
	if err := f.Stream(ctx, 1, nil); !errors.Is(err, postgres.ErrSlotLost) {
		t.Fatalf("Stream before Bootstrap: %v, want ErrSlotLost", err)
	}
	c := newConsumer()
	p, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'k' || g || '@x' FROM generate_series(1, 2000) g")
	st, err := f.SlotStatus(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Exists || st.WALStatus == "lost" || st.ConfirmedFlush != p || st.RetainedBytes <= 0 {
		t.Fatalf("slot status after bootstrap and an insert: %+v (point %s)", st, p)
	}
	stop := c.stream(f, p)
	defer stop()
	c.waitFor(t, fx.walEnd(t))
	testsvc.Eventually(t, waitLimit, func() bool { return !f.Health().CaughtUp.IsZero() }, "Health().CaughtUp never set")
	if h := f.Health(); !h.Streaming || !h.Connected || h.Err != nil {
		t.Fatalf("health while streaming: %+v", h)
	}
	c.mu.Lock()
	last := c.last
	c.mu.Unlock()
	if err := f.Confirm(ctx, last); err != nil {
		t.Fatal(err)
	}
	testsvc.Eventually(t, waitLimit, func() bool {
		st2, err := f.SlotStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st2.ConfirmedFlush == last
	}, "the slot did not confirm %s", last)
	if len(c.keys) != 2000 {
		t.Fatalf("%d keys streamed, want 2000", len(c.keys))
	}
}

// TestFeedSlotInvalidated: a slot past max_slot_wal_keep_size is
// invalidated at a checkpoint (wal_status = 'lost'); the running Stream ends
// with ErrSlotLost. The setting is server-wide, so the test has a cluster
// of its own.
func TestFeedSlotInvalidated(t *testing.T) {
	t.Parallel() // no open transaction that would hold up the others' slot creation
	fx := feedFixtureOn(t, testsvc.NewPostgres(t, testsvc.PGOptions{}).DSN, "")
	ctx := context.Background()
	f := fx.feed(t)
	c := newConsumer()
	p, err := f.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	stop := c.stream(f, p) // never confirms: the slot falls behind
	defer stop()
	fx.exec(t, "ALTER SYSTEM SET max_slot_wal_keep_size = '1MB'")
	fx.exec(t, "SELECT pg_reload_conf()")
	testsvc.Eventually(t, waitLimit, func() bool {
		st, err := f.SlotStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if st.WALStatus == "lost" {
			return true
		}
		fx.exec(t, "INSERT INTO "+fx.table+" (email) SELECT 'fill-' || g || '-' || random() FROM generate_series(1, 20000) g")
		fx.exec(t, "SELECT pg_switch_wal()")
		fx.exec(t, "CHECKPOINT")
		return false
	}, "the slot was never invalidated")
	err = c.waitEnd(t)
	if !errors.Is(err, postgres.ErrSlotLost) {
		t.Fatalf("Stream on an invalidated slot: %v, want ErrSlotLost", err)
	}
	if st, _ := f.SlotStatus(ctx); st.RetainedBytes != 0 {
		t.Fatalf("a lost slot retains %d bytes", st.RetainedBytes)
	}
}

// What a consumer (the root package's follower) needs of a feed, in
// changefeed's terms only: *Feed provides it.
var _ interface {
	Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error)
	Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error
	Confirm(ctx context.Context, p changefeed.Position) error
} = (*postgres.Feed)(nil)
