package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// expiringFollowConf is a config file with one table-backed expiring set
// "revoked" over dsn's revocations table, following its change feed.
func expiringFollowConf(t *testing.T, dsn, extra string) (path, respAddr, httpAddr string) {
	t.Helper()
	return serveConf(t, t.TempDir(), fmt.Sprintf(`set revoked {
  postgres %s
  kind expiring
  table revocations
  column jti
  expires-column expires_at
  max-ttl 90s
  capacity 100000
  generations 20
  slot bg_rev
  publication bg_rev
%s}
`, dsn, extra))
}

// TestExpiringFollow: a PostgreSQL table-backed expiring set follows the
// table's change feed. Rows any service writes with plain SQL — INSERT,
// COPY, an UPDATE moving an expiry later, a transaction open across
// start-up — are present through BG.XEXISTS and BF.EXISTS within max-lag
// of their commit and never absent after that while their expiry is
// ahead; rows whose expiry passes drop out; the set answers present to
// everything (not ready, saying why) until it has caught up, and again when
// its feed breaks, and comes back.
func TestExpiringFollow(t *testing.T) {
	testsvc.Short(t, "a long scenario: the server through start-up, a stalled feed and a dropped slot (source/postgres TestExpiringFeed covers the feed in -short)")
	const maxLag = 2 * time.Second
	bin := buildBinary(t)
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE revocations (jti text PRIMARY KEY, expires_at timestamptz)",
		"CREATE PUBLICATION bg_rev FOR TABLE revocations")
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := pool.Exec(ctx, q, args...); err != nil {
			t.Fatal(err)
		}
	}
	live := time.Now().Add(80 * time.Second) // within max-ttl: rows beyond it would fail the set open
	for i := range 200 {
		exec("INSERT INTO revocations VALUES ($1, $2), ($3, now() - interval '1 minute')",
			fmt.Sprintf("before-%d", i), live, fmt.Sprintf("gone-%d", i))
	}
	// A transaction open across start-up: the slot waits for it, the set
	// answers present to everything meanwhile.
	open, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Rollback(ctx)
	if _, err := open.Exec(ctx, "INSERT INTO revocations VALUES ('open', $1)", live); err != nil {
		t.Fatal(err)
	}

	conf, respAddr, httpAddr := expiringFollowConf(t, pg.DSN, fmt.Sprintf("  max-lag %v\n", maxLag))
	srv := startServe(t, bin, "-config", conf)
	rdb := redis.NewClient(&redis.Options{Addr: respAddr})
	defer rdb.Close()
	exists := func(key string) (x, bf bool) {
		t.Helper()
		x, err1 := rdb.Do(ctx, "BG.XEXISTS", "revoked", key).Bool()
		bf, err2 := rdb.Do(ctx, "BF.EXISTS", "revoked", key).Bool()
		if err1 != nil || err2 != nil {
			t.Fatalf("EXISTS %s: %v, %v", key, err1, err2)
		}
		return x, bf
	}
	// Present within max-lag of the commit, and never absent after that.
	seenBy := func(key string, committed time.Time) {
		t.Helper()
		for {
			x, bf := exists(key)
			if x && bf {
				return
			}
			if since := time.Since(committed); since > maxLag {
				t.Fatalf("%s absent %v after its commit (BG.XEXISTS %v, BF.EXISTS %v); server:\n%s", key, since, x, bf, srv.stderr)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	testsvc.Eventually(t, 10*time.Second, func() bool {
		var n int
		pool.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = 'bg_rev'").Scan(&n)
		return n == 1
	}, "the slot never appeared; server:\n%s", srv.stderr)
	r, err := getReadyz(httpAddr)
	if err != nil || r.Ready || r.Sets["revoked"].Ready || r.Sets["revoked"].Mode != "follow" || r.Sets["revoked"].Reason == "" {
		t.Errorf("/readyz while the slot waits for an open transaction: %+v, %v; want not ready, mode follow, a reason", r, err)
	}
	if x, bf := exists("never-revoked"); !x || !bf {
		t.Errorf("before the set is ready a lookup answers %v/%v, want present", x, bf)
	}
	if err := open.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	seenBy("open", time.Now()) // committed before the slot's point: in the scan, or after it: in the stream
	waitReadyz(t, httpAddr, 20*time.Second)

	for i := range 200 {
		if x, bf := exists(fmt.Sprintf("before-%d", i)); !x || !bf {
			t.Fatalf("before-%d absent (%v/%v)", i, x, bf)
		}
	}
	fps := 0
	for i := range 200 {
		if x, _ := exists(fmt.Sprintf("gone-%d", i)); x {
			fps++
		}
	}
	if fps > 5 {
		t.Errorf("%d of 200 expired rows present", fps)
	}

	// Plain SQL from another service: INSERT, a multi-row COPY, an UPDATE
	// moving an expiry later.
	exec("INSERT INTO revocations VALUES ('inserted', $1), ('short', now() + interval '3 seconds')", live)
	seenBy("inserted", time.Now())
	seenBy("short", time.Now())
	n, err := pool.CopyFrom(ctx, pgx.Identifier{"revocations"}, []string{"jti", "expires_at"},
		pgx.CopyFromRows([][]any{{"copied-1", live}, {"copied-2", live}}))
	if err != nil || n != 2 {
		t.Fatal(n, err)
	}
	seenBy("copied-1", time.Now())
	seenBy("copied-2", time.Now())
	exec("UPDATE revocations SET expires_at = $1 WHERE jti = 'short'", live)
	extended := time.Now()
	exec("INSERT INTO revocations VALUES ('soon', now() + interval '2 seconds')")
	seenBy("soon", time.Now())
	// 'soon' drops out once its expiry passes; 'short', moved later, stays.
	testsvc.Eventually(t, 20*time.Second, func() bool {
		x, _ := exists("soon")
		return !x
	}, "a row whose expiry passed is still present")
	if x, bf := exists("short"); !x || !bf {
		t.Fatalf("a row whose expiry an UPDATE moved later is absent %v after the update (%v/%v)", time.Since(extended), x, bf)
	}

	// The stream falls behind (its walsender stopped with SIGSTOP, for
	// longer than max-lag): the set fails open, says why, and comes back.
	var walsender int
	if err := pool.QueryRow(ctx, "SELECT active_pid FROM pg_replication_slots WHERE slot_name = 'bg_rev'").Scan(&walsender); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(walsender, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	defer syscall.Kill(walsender, syscall.SIGCONT)
	// Writes go on while the feed stalls: the database's head moves past
	// what the set applied, so its lag grows. (With no write, the set is
	// as fresh as the database's head and stays ready; the test then
	// depended on PostgreSQL writing WAL of its own within the wait, and
	// failed when it did not.)
	exec("INSERT INTO revocations VALUES ('stall-started', $1)", live)
	var lagged readyz
	testsvc.Eventually(t, 20*time.Second, func() bool {
		lagged, _ = getReadyz(httpAddr)
		return !lagged.Ready && strings.Contains(lagged.Sets["revoked"].Reason, "exceeds max-lag")
	}, "/readyz never reported the lag: %+v", &lagged)
	t.Logf("stalled: %s", lagged.Sets["revoked"].Reason)
	if x, bf := exists("never-revoked"); !x || !bf {
		t.Errorf("a set behind by more than max-lag answers %v/%v, want present", x, bf)
	}
	exec("INSERT INTO revocations VALUES ('while-behind', $1)", live)
	behind := time.Now()
	syscall.Kill(walsender, syscall.SIGCONT)
	seenBy("while-behind", behind)
	seenBy("stall-started", time.Now())
	waitReadyz(t, httpAddr, 30*time.Second)
	seenBy("while-behind", time.Now())

	// The feed breaks (its slot dropped): the set fails open at once, says
	// why, and comes back from a new slot and a new scan.
	testsvc.Eventually(t, 10*time.Second, func() bool {
		pool.Exec(ctx, "SELECT pg_terminate_backend(active_pid) FROM pg_replication_slots WHERE slot_name = 'bg_rev' AND active_pid IS NOT NULL")
		_, err := pool.Exec(ctx, "SELECT pg_drop_replication_slot('bg_rev')")
		return err == nil
	}, "could not drop the slot")
	exec("INSERT INTO revocations VALUES ('during-outage', $1)", live)
	outage := time.Now()
	var last readyz
	testsvc.Eventually(t, 10*time.Second, func() bool {
		last, _ = getReadyz(httpAddr)
		return !last.Ready && strings.Contains(last.Sets["revoked"].Reason, "slot")
	}, "/readyz never reported the lost slot: %+v", &last)
	seenBy("during-outage", outage) // present all along: failing open, then from the new scan
	waitReadyz(t, httpAddr, 20*time.Second)
	if x, bf := exists("during-outage"); !x || !bf {
		t.Fatal("a row inserted while the feed was broken is absent once it is back")
	}
	exec("INSERT INTO revocations VALUES ('after-outage', $1)", live)
	seenBy("after-outage", time.Now())
	for _, k := range []string{"open", "inserted", "copied-1", "short", "before-7"} {
		if x, bf := exists(k); !x || !bf {
			t.Errorf("%s absent after the feed came back", k)
		}
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	metrics := string(body)
	for _, want := range []string{`bloomgate_serve_set_ready{set="revoked"} 1`, `bloomgate_serve_set_mode{mode="follow",set="revoked"} 1`} {
		if !strings.Contains(metrics, want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if !strings.Contains(srv.stderr.String(), "change feed stopped") {
		t.Errorf("the broken feed was not logged:\n%s", srv.stderr)
	}
}

// TestExpiringFollowConfigErrors: a followed expiring set on a server with
// wal_level replica, or over a publication without updates, is a clear error
// within seconds naming the set.
func TestExpiringFollowConfigErrors(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	set := func(dsn, table, extra string) string {
		return "set revoked {\n  postgres " + dsn + "\n  kind expiring\n  table " + table + "\n  column jti\n  expires-column expires_at\n" +
			"  max-ttl 1h\n  capacity 1000\n  connect-timeout 3s\n" + extra + "}\n"
	}
	t.Run("wal_level replica", func(t *testing.T) {
		dsn := testsvc.Postgres(t) // the shared server: wal_level = replica
		runServeFail(t, bin, set(dsn, "pg_catalog.pg_class", ""), 15*time.Second,
			`set "revoked": follow:`, "wal_level", `"follow no"`)
	})
	t.Run("publication without updates", func(t *testing.T) {
		// Not the table name of TestExpiringFollowDefaults, which runs
		// alongside on the same cluster: the default slot name comes from
		// it, and slot names are cluster-wide (this server dropped that
		// test's slot from under it).
		pg := testsvc.LogicalPostgres(t)
		pg.SQL(t, "CREATE TABLE revocations_ins (jti text PRIMARY KEY, expires_at timestamptz)",
			"CREATE PUBLICATION bg_rev FOR TABLE revocations_ins WITH (publish = 'insert')")
		runServeFail(t, bin, set(pg.DSN, "revocations_ins", "  publication bg_rev\n"), 15*time.Second,
			`set "revoked": publication bg_rev does not publish updates`, `"follow no"`)
	})
}

// TestExpiringFollowDefaults: with nothing but postgres and the table, the
// set follows the feed (slot and publication by their default names) and a
// row another service INSERTs is present within the default max-lag. A
// rescan-only set answered absent for it until its next rescan.
func TestExpiringFollowDefaults(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE revocations (jti text PRIMARY KEY, expires_at timestamptz)",
		"CREATE PUBLICATION bloomgate_public_revocations_jti FOR TABLE revocations")
	conf, respAddr, httpAddr := serveConf(t, t.TempDir(), fmt.Sprintf(`set revoked {
  postgres %s
  kind expiring
  table revocations
  column jti
  expires-column expires_at
  max-ttl 1h
  capacity 1000
}
`, pg.DSN))
	srv := startServe(t, bin, "-config", conf)
	waitReadyz(t, httpAddr, 20*time.Second)
	rdb := redis.NewClient(&redis.Options{Addr: respAddr})
	defer rdb.Close()
	ctx := context.Background()
	if ok, err := rdb.Do(ctx, "BG.XEXISTS", "revoked", "revoked-jti").Bool(); err != nil || ok {
		t.Fatalf("before the insert: %v, %v", ok, err)
	}
	pg.SQL(t, "INSERT INTO revocations VALUES ('revoked-jti', now() + interval '30 minutes')")
	committed := time.Now()
	for {
		ok, err := rdb.Do(ctx, "BG.XEXISTS", "revoked", "revoked-jti").Bool()
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			break
		}
		if since := time.Since(committed); since > 30*time.Second { // the default max-lag
			t.Fatalf("a revocation inserted by plain SQL is still absent %v after its commit; server:\n%s", since, srv.stderr)
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Logf("present %v after the commit", time.Since(committed).Round(time.Millisecond))

	// A NULL expiry from the stream is a row the set cannot place: it fails
	// open (every lookup present) for the max TTL, logged, rather than drop
	// the key.
	pg.SQL(t, "INSERT INTO revocations VALUES ('no-expiry', NULL)")
	testsvc.Eventually(t, 30*time.Second, func() bool {
		ok, _ := rdb.Do(ctx, "BG.XEXISTS", "revoked", "never-revoked").Bool()
		return ok
	}, "a row with a NULL expiry did not fail the set open")
	// The line reaches the pipe from the server's stderr a moment later.
	testsvc.Eventually(t, 5*time.Second, func() bool {
		return strings.Contains(srv.stderr.String(), "no usable key or expiry")
	}, "the NULL expiry was not logged")

	// A clean stop drops the slot: every start makes a new one, and one
	// left behind would hold WAL.
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.wait(); err != nil {
		t.Fatalf("serve after SIGTERM: %v\n%s", err, srv.stderr)
	}
	if out := pg.SQL(t, "SELECT count(*) FROM pg_replication_slots WHERE database = current_database()"); strings.TrimSpace(out) != "0" {
		t.Errorf("replication slots after a clean stop: %s\n%s", out, srv.stderr)
	}
}
