package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestServeFanoutFollowsRebuilds: two `bloomgate serve` processes from one
// config (both with the database's credentials: one feeds, one stands by
// as an instance), fanned out over a Redis stream and over a JetStream
// server, while plain SQL grows the table from 20 k rows past 4× the first
// filter's capacity. The feeder rebuilds its filter as it grows; every
// process serves each newer filter within seconds (BF.INFO's capacity
// stays at or above its items), the rate on never-inserted keys stays
// within 2× the target, no row is ever absent, and no process logs a
// rebuild of its own (an instance holds no database snapshot to rebuild
// from) or a snapshot it cannot place in the log, and every process swaps
// each newer filter in beside its stream (never ending it to reload).
func TestServeFanoutFollowsRebuilds(t *testing.T) {
	testsvc.Short(t, "starts PostgreSQL, Redis or NATS, and two servers, and grows a table to 240 k rows")
	for _, engine := range []string{"redis", "jetstream"} {
		t.Run(engine, func(t *testing.T) { fanoutGrowth(t, engine) })
	}
}

func fanoutGrowth(t *testing.T, engine string) {
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	ctx := context.Background()
	sqlPool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlPool.Close()
	insert := func(from, to int) changefeed.Position {
		t.Helper()
		if _, err := sqlPool.Exec(ctx, "INSERT INTO users SELECT 'r' || i || '@example.com' FROM generate_series($1::int, $2::int) i", from, to-1); err != nil {
			t.Fatal(err)
		}
		var lsn string
		if err := sqlPool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			t.Fatal(err)
		}
		p, err := postgres.ParseLSN(lsn)
		if err != nil {
			t.Fatal(err)
		}
		return p
	}
	insert(0, 20_000)

	fan := ""
	switch engine {
	case "redis":
		fan = "  fanout redis\n  redis redis://" + startRedis(t) + "/0\n  fanout-unsigned yes\n"
	case "jetstream":
		nats := testsvc.NewNATSCluster(t)
		fan = "  fanout jetstream\n  nats " + nats.URLs() + "\n  replicas 3\n  fanout-unsigned yes\n"
	}
	const fpRate = 0.01
	dir := t.TempDir()
	conf := filepath.Join(dir, "bloomgate.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`set users {
  postgres %s
  table users
  column email
  slot bg_users
  publication bg_users
  fp-rate %g
  max-lag 5s
  snapshot-interval 1s
  lease-ttl 3s
  connect-timeout 10s
%s}
`, pg.DSN, fpRate, fan)), 0o644)

	type node struct {
		http string
		srv  *server
		rdb  *redis.Client
	}
	nodes := make([]*node, 2)
	for i := range nodes {
		n := &node{http: freeAddr(t)}
		resp := freeAddr(t)
		n.srv = startServe(t, bin, "-config", conf, "-resp", resp, "-http", n.http, "-data", filepath.Join(dir, fmt.Sprint("serve", i)))
		n.rdb = redis.NewClient(&redis.Options{Addr: resp, Protocol: 2}) // BF.INFO as a flat array
		defer n.rdb.Close()
		nodes[i] = n
		waitReadyz(t, n.http, 60*time.Second)
	}
	defer func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("serve%d stderr (last 8 KB):\n%s", i, lastBytes(n.srv.stderr.String(), 8<<10))
			}
		}
	}()

	info := func(n *node) (capacity, items int64) {
		v, err := n.rdb.Do(ctx, "BF.INFO", "users").Slice()
		if err != nil {
			t.Fatalf("BF.INFO: %v", err)
		}
		for i := 0; i+1 < len(v); i += 2 {
			switch v[i] {
			case "Capacity":
				capacity = v[i+1].(int64)
			case "Number of items inserted":
				items = v[i+1].(int64)
			}
		}
		return capacity, items
	}
	// fp is the share of n never-inserted keys BF.MEXISTS answers 1 for.
	fp := func(nd *node, n int) float64 {
		args := []any{"BF.MEXISTS", "users"}
		for i := range n {
			args = append(args, fmt.Sprintf("never-%d-%d@example.org", time.Now().UnixNano(), i))
		}
		v, err := nd.rdb.Do(ctx, args...).Int64Slice()
		if err != nil {
			t.Fatalf("BF.MEXISTS: %v", err)
		}
		hits := 0
		for _, x := range v {
			hits += int(x)
		}
		return float64(hits) / float64(n)
	}

	const step, rows = 20_000, 240_000
	for from := 20_000; from < rows; from += step {
		pos := insert(from, from+step)
		for i, n := range nodes {
			testsvc.Eventually(t, 60*time.Second, func() bool { return setPosition(t, n.http, "users") >= pos },
				"serve%d never applied the rows up to %d", i, from+step)
		}
	}
	// Every process serves a filter sized for the table: the feeder's last
	// rebuild, loaded by the instance within seconds.
	for i, n := range nodes {
		var c, it int64
		var rate float64
		testsvc.Eventually(t, 30*time.Second, func() bool {
			r, err := getReadyz(n.http)
			if err != nil || !r.Sets["users"].Ready {
				return false
			}
			c, it = info(n)
			rate = fp(n, 5000)
			if c >= it && rate <= 2*fpRate {
				return true
			}
			time.Sleep(200 * time.Millisecond)
			return false
		}, "serve%d does not serve the feeder's rebuilt filter: %v", i, lazy(func() string {
			return fmt.Sprintf("capacity %d for %d items, FP rate %.4f (target %g)", c, it, rate, fpRate)
		}))
		t.Logf("serve%d: capacity %d, items %d, FP rate %.4f (target %g)", i, c, it, rate, fpRate)
	}
	// No row absent on any process.
	for i, n := range nodes {
		args := []any{"BF.MEXISTS", "users"}
		for k := 0; k < rows; k += 97 {
			args = append(args, fmt.Sprintf("r%d@example.com", k))
		}
		v, err := n.rdb.Do(ctx, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for j, x := range v {
			if x != 1 {
				t.Errorf("serve%d: false negative for %v", i, args[j+2])
			}
		}
	}
	for i, n := range nodes {
		log := n.srv.stderr.String()
		// Newer filters are swapped in beside the stream: never a stream
		// ended to reload one (failing open meanwhile).
		for _, bad := range []string{"rebuild from the change feed failed", "no log cursor known",
			"loads the feeder's newer filter", "could not be swapped in beside the stream"} {
			if c := strings.Count(log, bad); c > 0 {
				t.Errorf("serve%d logged %q %d times", i, bad, c)
			}
		}
		if c := strings.Count(log, "swapped in the newer filter"); c == 0 {
			t.Errorf("serve%d never swapped in a newer filter", i)
		} else {
			t.Logf("serve%d swapped in %d newer filters", i, c)
		}
	}
}

// lazy formats as what its function returns when the message is printed.
type lazy func() string

func (l lazy) String() string { return l() }

// lastBytes returns the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
