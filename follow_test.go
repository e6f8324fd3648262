package bloomgate_test

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// followFixture: a table with its own schema, publication and slot, all
// dropped when the test ends.
type followFixture struct {
	pool  *pgxpool.Pool
	table string
	cfg   postgres.FeedConfig
}

func newFollowFixture(t *testing.T) *followFixture {
	t.Helper()
	url := os.Getenv("BLOOMGATE_POSTGRES_URL")
	if url == "" {
		url = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	}
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, url)
	if err != nil {
		if os.Getenv("BLOOMGATE_REQUIRE_SERVICES") != "" {
			t.Fatalf("PostgreSQL unreachable and BLOOMGATE_REQUIRE_SERVICES is set: %v", err)
		}
		t.Skipf("PostgreSQL unreachable, skipping: %v", err)
	}
	var b [6]byte
	rand.Read(b[:])
	name := "bg_follow_" + hex.EncodeToString(b[:])
	fx := &followFixture{pool: pool, table: name + ".users"}
	t.Cleanup(func() {
		for range 100 {
			var left int
			pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = $1 AND active_pid IS NOT NULL", name)
			pool.Exec(ctx, "SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE slot_name = $1 AND NOT active", name)
			if pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", name).Scan(&left) == nil && left == 0 {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		pool.Exec(ctx, "DROP PUBLICATION IF EXISTS "+name)
		pool.Exec(ctx, "DROP SCHEMA IF EXISTS "+name+" CASCADE")
		pool.Close()
	})
	for _, q := range []string{
		"CREATE SCHEMA " + name,
		"CREATE TABLE " + fx.table + " (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text NOT NULL UNIQUE)",
		"ALTER TABLE " + fx.table + " REPLICA IDENTITY USING INDEX users_email_key",
		"CREATE PUBLICATION " + name + " FOR TABLE " + fx.table,
	} {
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	fx.cfg = postgres.FeedConfig{ConnString: pool.Config().ConnString(), Table: fx.table, Column: "email",
		Slot: name, Publication: name, StatusInterval: 50 * time.Millisecond, MaxBackoff: 200 * time.Millisecond}
	return fx
}

func (fx *followFixture) insert(t *testing.T, prefix string, n int) {
	t.Helper()
	if _, err := fx.pool.Exec(context.Background(), "INSERT INTO "+fx.table+" (email) SELECT $1 || g FROM generate_series(1, $2::int) g", prefix, n); err != nil {
		t.Fatal(err)
	}
}

func (fx *followFixture) keys(t *testing.T) []string {
	t.Helper()
	rows, err := fx.pool.Query(context.Background(), "SELECT email FROM "+fx.table)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var ks []string
	for rows.Next() {
		var k string
		rows.Scan(&k)
		ks = append(ks, k)
	}
	return ks
}

// follow starts a follower over a new Feed; stop cancels Run and waits.
func (fx *followFixture) follow(t *testing.T, fc bloomgate.FollowConfig, before ...func(*bloomgate.Gate)) (*bloomgate.Gate, *postgres.Feed, func()) {
	t.Helper()
	feed, err := postgres.NewFeed(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	fc.Feed = feed
	g, fl, err := bloomgate.NewFollower(bloomgate.Config{Logger: slog.New(slog.NewTextHandler(testWriter{t}, nil))}, fc)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range before {
		f(g)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fl.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Errorf("Run: %v", err)
			}
			g.Close()
			feed.Close()
		})
	}
	t.Cleanup(stop)
	return g, feed, stop
}

// caughtUp waits until the gate is ready and the feed has delivered
// everything committed so far.
func (fx *followFixture) caughtUp(t *testing.T, g *bloomgate.Gate, feed *postgres.Feed) {
	t.Helper()
	var s string
	if err := fx.pool.QueryRow(context.Background(), "SELECT pg_current_wal_lsn()::text").Scan(&s); err != nil {
		t.Fatal(err)
	}
	end, err := changefeed.ParsePosition(s)
	if err != nil {
		t.Fatal(err)
	}
	for !g.Ready() || feed.Health().Delivered < end {
		time.Sleep(5 * time.Millisecond)
	}
}

// snapshotPosition reads the position from a snapshot's header (layout in
// follow.go: magic, version, fingerprint length and bytes, position).
func snapshotPosition(t *testing.T, path string) changefeed.Position {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil || len(b) < 8 {
		t.Fatalf("snapshot: %v", err)
	}
	f := int(binary.LittleEndian.Uint16(b[6:]))
	return changefeed.Position(binary.LittleEndian.Uint64(b[8+f:]))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

func noFalseNegatives(t *testing.T, g *bloomgate.Gate, ks []string) {
	t.Helper()
	if !g.Ready() {
		t.Fatal("gate not ready")
	}
	for _, k := range ks {
		if !g.MayContainString(k) {
			t.Fatalf("false negative for %q (of %d keys)", k, len(ks))
		}
	}
}

// TestFollow: rows written by other clients before, during and after the
// bootstrap reach the gate; a snapshot taken while following gives a cold
// start that catches up with rows written while the gate was down; a
// corrupt or foreign snapshot is skipped for a bootstrap.
func TestFollow(t *testing.T) {
	fx := newFollowFixture(t)
	path := filepath.Join(t.TempDir(), "users.snap")
	fc := bloomgate.FollowConfig{SnapshotPath: path, SnapshotInterval: 50 * time.Millisecond, Fingerprint: "users/email"}
	fx.insert(t, "before-", 2000)

	stopWriter := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stopWriter:
				return
			default:
			}
			if _, err := fx.pool.Exec(context.Background(), "INSERT INTO "+fx.table+" (email) VALUES ($1)", fmt.Sprintf("during-%d", i)); err != nil {
				t.Error(err)
				return
			}
		}
	})
	g, feed, stop := fx.follow(t, fc)
	fx.caughtUp(t, g, feed)
	close(stopWriter)
	wg.Wait()
	fx.insert(t, "after-", 500)
	fx.caughtUp(t, g, feed)
	noFalseNegatives(t, g, fx.keys(t))
	stop() // writes a last snapshot and confirms it

	// Acknowledged only what a snapshot holds: the slot's confirmed
	// position never passes the newest snapshot's.
	snapPos := snapshotPosition(t, path)
	probe, err := postgres.NewFeed(fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	st, err := probe.SlotStatus(context.Background())
	probe.Close()
	if err != nil {
		t.Fatal(err)
	}
	if st.ConfirmedFlush > snapPos || st.ConfirmedFlush == 0 {
		t.Fatalf("slot confirmed %s, newest snapshot at %s", st.ConfirmedFlush, snapPos)
	}

	// Cold start: the snapshot's filter, failing open until caught up.
	fx.insert(t, "while-down-", 300)
	g2, feed2, stop2 := fx.follow(t, fc, func(g *bloomgate.Gate) {
		if st, reason := g.State(); st != bloomgate.StateWarming || !strings.HasPrefix(reason, "catching up from snapshot") {
			t.Fatalf("the snapshot was not used: %v %q", st, reason)
		}
	})
	fx.caughtUp(t, g2, feed2)
	noFalseNegatives(t, g2, fx.keys(t))
	stop2()

	for _, tc := range []struct {
		name string
		fc   bloomgate.FollowConfig
		harm func()
	}{
		{"corrupt", fc, func() {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			os.WriteFile(path, b, 0o644)
		}},
		{"foreign fingerprint", bloomgate.FollowConfig{SnapshotPath: path, Fingerprint: "other"}, func() {}},
		{"missing", fc, func() { os.Remove(path) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.harm()
			feed, err := postgres.NewFeed(fx.cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer feed.Close()
			tc.fc.Feed = feed
			g, _, err := bloomgate.NewFollower(bloomgate.Config{}, tc.fc)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			if st, reason := g.State(); st != bloomgate.StateWarming || reason != "not warmed yet" {
				t.Fatalf("a %s snapshot was used: %v %q", tc.name, st, reason)
			}
		})
	}
}

// TestFollowStaleSnapshot: a snapshot older than the position the slot has
// confirmed cannot be resumed from; the follower fails open, bootstraps
// again and ends up with every key.
func TestFollowStaleSnapshot(t *testing.T) {
	fx := newFollowFixture(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "users.snap")
	fc := bloomgate.FollowConfig{SnapshotPath: path, SnapshotInterval: 50 * time.Millisecond}
	fx.insert(t, "a-", 100)
	g, feed, stop := fx.follow(t, fc)
	fx.caughtUp(t, g, feed)
	stop()
	old, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	fx.insert(t, "b-", 100)
	g, feed, stop = fx.follow(t, fc)
	fx.caughtUp(t, g, feed)
	stop() // confirms a position beyond the old snapshot's
	os.WriteFile(path, old, 0o644)
	fx.insert(t, "c-", 100)
	g, feed, stop = fx.follow(t, fc)
	defer stop()
	fx.caughtUp(t, g, feed)
	noFalseNegatives(t, g, fx.keys(t))
}

var _ bloomgate.ChangeFeed = (*postgres.Feed)(nil)

// TestFollowWithoutSnapshots: with no snapshot file, every applied position
// is confirmed, so the slot does not hold WAL for a gate that will
// bootstrap on its next start anyway.
func TestFollowWithoutSnapshots(t *testing.T) {
	fx := newFollowFixture(t)
	fx.insert(t, "a-", 100)
	g, feed, _ := fx.follow(t, bloomgate.FollowConfig{})
	fx.caughtUp(t, g, feed)
	fx.insert(t, "b-", 100)
	fx.caughtUp(t, g, feed)
	noFalseNegatives(t, g, fx.keys(t))
	delivered := feed.Health().Delivered
	for {
		st, err := feed.SlotStatus(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if st.ConfirmedFlush >= delivered {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}
