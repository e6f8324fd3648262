package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestServeFeederOutage: two `bloomgate serve` processes that may feed (a
// postgres line) and one instance-only process (no postgres line, as
// docs/serve.md allows) share a fanned-out set. Five times (twice without
// BLOOMGATE_LONG=1), while plain SQL
// inserts rows, both feeder-capable processes are killed -9 for longer than
// the instance's head timeout + max-lag, and one is restarted. The
// instance-only process must never answer 0 for a row committed more than
// max-lag before the lookup, through the outage and the whole catch-up.
func TestServeFeederOutage(t *testing.T) {
	testsvc.Short(t, "starts PostgreSQL, a NATS cluster or Redis and three servers, and kills the feeders")
	for _, engine := range []string{"jetstream", "redis"} {
		t.Run(engine, func(t *testing.T) { runFeederOutage(t, engine) })
	}
}

func runFeederOutage(t *testing.T, engine string) {
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "INSERT INTO users SELECT 'pre' || i || '@example.com' FROM generate_series(1, 2000) i"); err != nil {
		t.Fatal(err)
	}
	const (
		maxLag      = 2 * time.Second
		headTimeout = 5 * time.Second // the instance's (docs/serve.md)
	)
	fan := ""
	switch engine {
	case "jetstream":
		fan = "  fanout jetstream\n  nats " + testsvc.NewNATSCluster(t).URLs() + "\n  replicas 3\n  fanout-unsigned yes\n"
	case "redis":
		fan = "  fanout redis\n  redis redis://" + startRedis(t) + "/0\n  fanout-unsigned yes\n"
	}
	dir := t.TempDir()
	set := func(db string) string {
		return fmt.Sprintf("set users {\n%s  table users\n  column email\n  slot bg_users\n  publication bg_users\n"+
			"  max-lag %v\n  snapshot-interval 1s\n  lease-ttl 2s\n  connect-timeout 10s\n%s}\n", db, maxLag, fan)
	}
	feederConf := filepath.Join(dir, "feeder.conf")
	instConf := filepath.Join(dir, "instance.conf")
	os.WriteFile(feederConf, []byte(set("  postgres "+pg.DSN+"\n")), 0o644)
	os.WriteFile(instConf, []byte(set("")), 0o644)
	node := func(name, conf string) *fanNode {
		n := &fanNode{name: name, resp: freeAddr(t), http: freeAddr(t)}
		n.args = []string{"-config", conf, "-resp", n.resp, "-http", n.http, "-data", filepath.Join(dir, name)}
		n.srv = startServe(t, bin, n.args...)
		n.rdb = redis.NewClient(&redis.Options{Addr: n.resp, ReadTimeout: time.Second, WriteTimeout: time.Second, MaxRetries: -1})
		t.Cleanup(func() { n.rdb.Close() })
		return n
	}
	a, b := node("a", feederConf), node("b", feederConf)
	waitReadyz(t, a.http, 60*time.Second)
	inst := node("instance", instConf)
	waitReadyz(t, inst.http, 60*time.Second)

	var (
		mu             sync.Mutex
		rows           []fanRow
		fnMu           sync.Mutex
		fns            []string
		nFN            int
		swept, written int
		stop           = make(chan struct{})
		wg             sync.WaitGroup
	)
	wg.Go(func() { // ~500 rows/s of plain SQL
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("w%d@example.com", i)
			if _, err := pool.Exec(ctx, "INSERT INTO users VALUES ($1)", key); err != nil {
				continue
			}
			mu.Lock()
			rows = append(rows, fanRow{key: key, at: time.Now()})
			written++
			mu.Unlock()
			time.Sleep(2 * time.Millisecond)
		}
	})
	wg.Go(func() { // every row older than max-lag, on the instance-only process
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			mu.Lock()
			all := rows
			mu.Unlock()
			cutoff := time.Now().Add(-maxLag)
			n := 0
			for n < len(all) && all[n].at.Before(cutoff) {
				n++
			}
			for lo := 0; lo < n; lo += 1000 {
				chunk := all[lo:min(lo+1000, n)]
				args := []any{"BF.MEXISTS", "users"}
				for _, r := range chunk {
					args = append(args, r.key)
				}
				res, err := inst.rdb.Do(ctx, args...).BoolSlice()
				if err != nil {
					continue
				}
				fnMu.Lock()
				swept += len(res)
				for i, ok := range res {
					if !ok {
						if nFN++; nFN <= 5 {
							fns = append(fns, fmt.Sprintf("%s committed %v before the lookup answered 0",
								chunk[i].key, time.Since(chunk[i].at).Round(time.Millisecond)))
						}
					}
				}
				fnMu.Unlock()
			}
		}
	})
	feeders := []*fanNode{a, b}
	cycles := fanouttest.OutageCycles()
	for c := range cycles {
		for _, n := range feeders {
			n.srv.cmd.Process.Kill()
			n.srv.wait()
		}
		time.Sleep(headTimeout + maxLag + 3*time.Second)
		// No feeder for longer than max-lag: the instance-only process says
		// it is not ready, and why.
		if r, err := getReadyz(inst.http); err != nil || r.Ready || r.Sets["users"].Ready || r.Sets["users"].Reason == "" {
			t.Errorf("%s cycle %d: /readyz of the instance-only process with every feeder down: %+v, %v", engine, c, r, err)
		} else if c == 0 {
			t.Logf("%s: /readyz with every feeder down: %s", engine, r.Sets["users"].Reason)
		}
		restarted := time.Now()
		n := []*fanNode{a, b}[c%2]
		n.srv = startServe(t, bin, n.args...)
		feeders = []*fanNode{n}
		waitReadyz(t, inst.http, 60*time.Second)
		t.Logf("%s cycle %d: %s restarted; the instance-only process ready again after %v", engine, c, n.name, time.Since(restarted).Round(time.Millisecond))
		time.Sleep(2 * time.Second)
	}
	close(stop)
	wg.Wait()
	fnMu.Lock()
	defer fnMu.Unlock()
	t.Logf("%s: %d rows written, %d lookups of rows older than max-lag %v on the instance-only process, %d answered 0", engine, written, swept, maxLag, nFN)
	if nFN > 0 {
		t.Errorf("%s: %d false negatives on the instance-only process:\n%s\nits log:\n%s", engine, nFN, strings.Join(fns, "\n"), tail(inst.srv.stderr.String(), 20))
	}
	if swept == 0 {
		t.Errorf("%s: no lookup was answered", engine)
	}
}

// tail returns the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
