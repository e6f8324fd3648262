package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// startRedis runs a private redis-server with an append-only file.
func startRedis(t *testing.T) string {
	t.Helper()
	bin := testsvc.Binary(t, "redis-server")
	addr := freeAddr(t)
	_, port, _ := strings.Cut(addr, ":")
	dir := t.TempDir()
	cmd := exec.Command(bin, "--bind", "127.0.0.1", "--port", port, "--save", "", "--appendonly", "yes",
		"--appendfsync", "everysec", "--dir", dir)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	testsvc.Eventually(t, 10*time.Second, func() bool { return rdb.Ping(context.Background()).Err() == nil }, "redis-server never answered")
	return addr
}

// fanNode is one `bloomgate serve` process of the fanned-out set.
type fanNode struct {
	name       string
	args       []string
	resp, http string
	srv        *server
	rdb        *redis.Client
	// off is set while the process is killed or stopped: the checkers skip
	// it (a stopped process cannot answer).
	off atomic.Bool
}

type fanRow struct {
	key, pos string
	at       time.Time
}

// TestServeFanout runs three `bloomgate serve` processes from one config
// file over a PostgreSQL table written only by plain SQL, fanned out over a
// 3-node JetStream cluster and over a Redis stream. While writers insert,
// update and delete, the test kills the feeder (a standby takes over),
// kills and restarts another process, SIGSTOPs one past max-lag, and (for
// JetStream) kills and restarts a NATS node. Every lookup of a row
// committed more than max-lag ago, and every read-your-writes lookup, on
// every running process, must answer 1; at the end phpredis and redis-py
// ask all three. The JetStream set signs its messages (fanout-key-file),
// the Redis one runs unsigned (fanout-unsigned yes).
func TestServeFanout(t *testing.T) {
	testsvc.Short(t, "starts PostgreSQL, a NATS cluster or Redis, and three servers, and runs faults for about a minute")
	for _, engine := range []string{"jetstream", "redis"} {
		t.Run(engine, func(t *testing.T) { runFanout(t, engine) })
	}
}

func runFanout(t *testing.T, engine string) {
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	ctx := context.Background()
	sqlPool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlPool.Close()
	if _, err := sqlPool.Exec(ctx, "INSERT INTO users SELECT 'pre' || i || '@example.com' FROM generate_series(1, 2000) i"); err != nil {
		t.Fatal(err)
	}

	const maxLag = 3 * time.Second
	var nats *testsvc.NATSCluster
	fan := ""
	switch engine {
	case "jetstream":
		nats = testsvc.NewNATSCluster(t)
		key := filepath.Join(t.TempDir(), "users.key")
		os.WriteFile(key, []byte("a key of 32 bytes for the test..\n"), 0o600)
		fan = "  fanout jetstream\n  nats " + nats.URLs() + "\n  replicas 3\n  fanout-key-file " + key + "\n"
	case "redis":
		fan = "  fanout redis\n  redis redis://" + startRedis(t) + "/0\n  fanout-unsigned yes\n"
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bloomgate.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`set users {
  postgres %s
  table users
  column email
  slot bg_users
  publication bg_users
  confirm SELECT 1 FROM users WHERE email = $1
  kind cuckoo
  max-lag %v
  snapshot-interval 1s
  lease-ttl 3s
  connect-timeout 10s
%s}
`, pg.DSN, maxLag, fan)), 0o644)

	nodes := make([]*fanNode, 3)
	for i := range nodes {
		n := &fanNode{name: fmt.Sprint("serve", i), resp: freeAddr(t), http: freeAddr(t)}
		n.args = []string{"-config", conf, "-resp", n.resp, "-http", n.http, "-data", filepath.Join(dir, n.name)}
		n.srv = startServe(t, bin, n.args...)
		n.rdb = redis.NewClient(&redis.Options{Addr: n.resp, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
		defer n.rdb.Close()
		nodes[i] = n
	}
	for _, n := range nodes {
		t.Cleanup(func() {
			if t.Failed() {
				t.Logf("%s stderr (tail):\n%s", n.name, tail(n.srv.stderr.String(), 3000))
			}
		})
		waitReadyz(t, n.http, 60*time.Second)
	}
	role := func(n *fanNode) string {
		r, err := getReadyz(n.http)
		if err != nil {
			return ""
		}
		return r.Sets["users"].Role
	}
	feederOf := func() *fanNode {
		for _, n := range nodes {
			if !n.off.Load() && role(n) == "feeder" {
				return n
			}
		}
		return nil
	}
	testsvc.Eventually(t, 20*time.Second, func() bool { return feederOf() != nil }, "no process became the feeder")

	var (
		mu      sync.Mutex
		live    = map[string]fanRow{}
		order   []string
		ryw     atomic.Int64 // read-your-writes lookups answered
		swept   atomic.Int64 // lookups of rows older than max-lag answered
		fnMu    sync.Mutex
		fns     []string
		stop    = make(chan struct{})
		wg      sync.WaitGroup
		written atomic.Int64
	)
	fail := func(format string, args ...any) {
		fnMu.Lock()
		defer fnMu.Unlock()
		if len(fns) < 20 {
			fns = append(fns, fmt.Sprintf(format, args...))
		} else {
			fns[19] = fmt.Sprintf("… and more (last: "+format+")", args...)
		}
	}
	for _, k := range []int{1, 2000} {
		key := fmt.Sprintf("pre%d@example.com", k)
		live[key] = fanRow{key: key, pos: "0/0", at: time.Now().Add(-time.Hour)}
		order = append(order, key)
	}
	// The writer: INSERT, now and then an UPDATE of the key or a DELETE,
	// each followed by a read-your-writes lookup on the next process.
	wg.Go(func() {
		conn, err := sqlPool.Acquire(ctx)
		if err != nil {
			fail("acquire: %v", err)
			return
		}
		defer conn.Release()
		sc := "on"
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			if i%500 == 0 { // alternate synchronous_commit
				if sc == "on" {
					sc = "off"
				} else {
					sc = "on"
				}
				conn.Exec(ctx, "SET synchronous_commit = "+sc)
			}
			key := fmt.Sprintf("w%d@example.com", i)
			var gone string
			switch {
			case i%50 == 25 && i > 100:
				gone = fmt.Sprintf("w%d@example.com", i-100)
				tag, err := conn.Exec(ctx, "UPDATE users SET email = $1 WHERE email = $2", key, gone)
				if err != nil {
					fail("update %d: %v", i, err)
					return
				}
				if tag.RowsAffected() == 0 {
					key = "" // the old key was gone already: nothing written
				}
			case i%70 == 35 && i > 100:
				gone = fmt.Sprintf("w%d@example.com", i-90)
				if _, err := conn.Exec(ctx, "DELETE FROM users WHERE email = $1", gone); err != nil {
					fail("delete %d: %v", i, err)
					return
				}
				key = ""
			default:
				if _, err := conn.Exec(ctx, "INSERT INTO users VALUES ($1)", key); err != nil {
					fail("insert %d: %v", i, err)
					return
				}
			}
			var pos string
			if err := conn.QueryRow(ctx, "SELECT pg_current_wal_insert_lsn()::text").Scan(&pos); err != nil {
				fail("position: %v", err)
				return
			}
			written.Add(1)
			mu.Lock()
			if gone != "" {
				delete(live, gone)
			}
			if key != "" {
				live[key] = fanRow{key: key, pos: pos, at: time.Now()}
				order = append(order, key)
			}
			mu.Unlock()
			if key == "" {
				continue
			}
			n := nodes[i%3]
			if n.off.Load() {
				continue
			}
			cmd := "BF.EXISTSAT"
			if i%7 == 0 {
				cmd = "BG.EXISTSAT"
			}
			ok, err := n.rdb.Do(ctx, cmd, "users", key, pos).Bool()
			if err != nil {
				continue // the process went away meanwhile: no answer, no false negative
			}
			ryw.Add(1)
			if !ok {
				fail("read-your-writes: %s %s at %s on %s (synchronous_commit=%s) answered 0", cmd, key, pos, n.name, sc)
			}
		}
	})
	// The sweeper: rows committed more than max-lag ago, on every process.
	sweep := func(sample int) {
		mu.Lock()
		cutoff := time.Now().Add(-maxLag)
		var keys []string
		for tries := 0; len(keys) < sample && tries < 4*sample && len(order) > 0; tries++ {
			k := order[rand.IntN(len(order))]
			if r, ok := live[k]; ok && r.at.Before(cutoff) {
				keys = append(keys, k)
			}
		}
		mu.Unlock()
		for _, n := range nodes {
			if n.off.Load() || len(keys) == 0 {
				continue
			}
			args := []any{"BF.MEXISTS", "users"}
			for _, k := range keys {
				args = append(args, k)
			}
			res, err := n.rdb.Do(ctx, args...).BoolSlice()
			if err != nil {
				continue
			}
			swept.Add(int64(len(res)))
			for i, ok := range res {
				if !ok {
					mu.Lock()
					_, still := live[keys[i]]
					mu.Unlock()
					if still {
						fail("sweep: %s (committed over %v ago) absent on %s", keys[i], maxLag, n.name)
					}
				}
			}
		}
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond):
			}
			sweep(300)
		}
	})

	time.Sleep(3 * time.Second)
	// 1. kill -9 the feeder: a standby takes over.
	old := feederOf()
	if old == nil {
		t.Fatal("no feeder")
	}
	old.off.Store(true)
	old.srv.cmd.Process.Kill()
	old.srv.wait()
	killed := time.Now()
	var takeover time.Duration
	testsvc.Eventually(t, 30*time.Second, func() bool {
		if f := feederOf(); f != nil && f != old {
			takeover = time.Since(killed)
			return true
		}
		return false
	}, "no standby took over from the killed feeder")
	t.Logf("%s: feeder %s killed; %s took over after %v", engine, old.name, feederOf().name, takeover.Round(time.Millisecond))
	time.Sleep(2 * time.Second)
	start := time.Now()
	old.srv = startServe(t, bin, old.args...)
	waitReadyz(t, old.http, 60*time.Second)
	t.Logf("%s: the killed feeder restarted: ready %v after exec (role %s)", engine, time.Since(start).Round(time.Millisecond), role(old))
	old.off.Store(false)

	// 2. kill -9 a process that is not the feeder, and restart it.
	f := feederOf()
	var other *fanNode
	for _, n := range nodes {
		if n != f {
			other = n
			break
		}
	}
	other.off.Store(true)
	other.srv.cmd.Process.Kill()
	other.srv.wait()
	time.Sleep(time.Second)
	start = time.Now()
	other.srv = startServe(t, bin, other.args...)
	waitReadyz(t, other.http, 60*time.Second)
	t.Logf("%s: %s killed and restarted: ready %v after exec", engine, other.name, time.Since(start).Round(time.Millisecond))
	other.off.Store(false)

	// 3. SIGSTOP a process past max-lag; it must fail open, not answer
	// from a stale filter, from its first lookup after SIGCONT.
	other.off.Store(true)
	other.srv.cmd.Process.Signal(syscall.SIGSTOP)
	time.Sleep(maxLag + 2*time.Second)
	other.srv.cmd.Process.Signal(syscall.SIGCONT)
	other.off.Store(false)
	sweep(1000)
	waitReadyz(t, other.http, 30*time.Second)

	// 4. JetStream: kill a NATS node and restart it.
	if nats != nil {
		nats.Kill(1)
		time.Sleep(3 * time.Second)
		nats.Start(1)
		time.Sleep(3 * time.Second)
	}
	time.Sleep(2 * time.Second)
	close(stop)
	wg.Wait()

	// Final: every process ready, every live row present on each, also
	// through phpredis and redis-py.
	for _, n := range nodes {
		waitReadyz(t, n.http, 60*time.Second)
	}
	time.Sleep(maxLag)
	mu.Lock()
	var rows []fanRow
	for _, r := range live {
		rows = append(rows, r)
	}
	mu.Unlock()
	for _, n := range nodes {
		for i := 0; i < len(rows); i += 1000 {
			args := []any{"BF.MEXISTS", "users"}
			for _, r := range rows[i:min(i+1000, len(rows))] {
				args = append(args, r.key)
			}
			res, err := n.rdb.Do(ctx, args...).BoolSlice()
			if err != nil {
				t.Fatalf("final sweep on %s: %v", n.name, err)
			}
			swept.Add(int64(len(res)))
			for j, ok := range res {
				if !ok {
					fail("final: %s absent on %s", rows[i+j].key, n.name)
				}
			}
		}
	}
	keyFile := filepath.Join(dir, "keys.txt")
	var b strings.Builder
	for i, r := range rows {
		if i >= 1500 {
			break
		}
		fmt.Fprintf(&b, "%s %s\n", r.key, r.pos)
	}
	os.WriteFile(keyFile, []byte(b.String()), 0o644)
	addrs := []string{keyFile}
	for _, n := range nodes {
		addrs = append(addrs, n.resp)
	}
	var clientChecks []string
	for _, c := range [][]string{{"php", "testdata/fanout_check.php"}, {"/usr/bin/python3", "testdata/fanout_check.py"}} {
		if _, err := exec.LookPath(c[0]); err != nil {
			testsvc.Unavailable(t, "%s not installed", c[0])
			continue
		}
		out, err := exec.Command(c[0], append([]string{c[1]}, addrs...)...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: %v\n%s", c[1], err, out)
		}
		clientChecks = append(clientChecks, c[1]+": "+strings.TrimSpace(string(out)))
	}
	fnMu.Lock()
	defer fnMu.Unlock()
	for _, f := range fns {
		t.Error(f)
	}
	t.Logf("%s: %d writes; %d read-your-writes lookups, %d lookups of rows older than max-lag; %s; %d false negatives",
		engine, written.Load(), ryw.Load(), swept.Load(), strings.Join(clientChecks, "; "), len(fns))
}
