package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestServeFanoutKey: with fanout-key-file, a message on the set's stream
// that the feeder did not sign is never applied. Someone with write access
// to the Redis stream appends a well-formed continuation — the feeder's
// term, the next position, a DELETE of a row that is in the table —
// unsigned, then signed with another key; every process answers 1 for that
// row throughout, and the instance is ready again afterwards. A process
// with a different key never becomes ready (it fails open). A key file
// that is too short stops the server with a message naming the set.
func TestServeFanoutKey(t *testing.T) {
	testsvc.Short(t, "starts PostgreSQL, a redis-server and three servers")
	bin := buildBinary(t)
	ctx := context.Background()
	pg := newFollowedDB(t)
	pool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(ctx, "INSERT INTO users SELECT 'pre' || i || '@x' FROM generate_series(1, 500) i"); err != nil {
		t.Fatal(err)
	}
	redisAddr := startRedis(t)
	dir := t.TempDir()
	keyA, keyB := filepath.Join(dir, "a.key"), filepath.Join(dir, "b.key")
	os.WriteFile(keyA, []byte("0123456789abcdef0123456789abcdef\n"), 0o600)
	os.WriteFile(keyB, []byte("another key, just as long, 32 b.\n"), 0o600)
	conf := func(name, keyFile string, feeder bool) string {
		db := ""
		if feeder {
			db = "  postgres " + pg.DSN + "\n  slot bg_users\n  publication bg_users\n"
		}
		path := filepath.Join(dir, name+".conf")
		os.WriteFile(path, []byte(fmt.Sprintf(`set users {
%s  table users
  column email
  kind cuckoo
  max-lag 2s
  snapshot-interval 1s
  lease-ttl 2s
  fanout redis
  redis redis://%s/0
  fanout-key-file %s
}
`, db, redisAddr, keyFile)), 0o644)
		return path
	}
	type node struct {
		resp, http string
		rdb        *redis.Client
	}
	start := func(name, keyFile string, feeder bool) node {
		n := node{resp: freeAddr(t), http: freeAddr(t)}
		startServe(t, bin, "-config", conf(name, keyFile, feeder), "-resp", n.resp, "-http", n.http, "-data", filepath.Join(dir, name))
		n.rdb = redis.NewClient(&redis.Options{Addr: n.resp})
		t.Cleanup(func() { n.rdb.Close() })
		return n
	}
	feeder := start("feeder", keyA, true)
	inst := start("instance", keyA, false)
	stranger := start("stranger", keyB, false)
	waitReadyz(t, feeder.http, 60*time.Second)
	waitReadyz(t, inst.http, 60*time.Second)

	// A writer keeps the database's head moving, so that a forged batch
	// just past the feeder's last one is within the head it may claim.
	wctx, stopWriter := context.WithCancel(ctx)
	defer stopWriter()
	go func() {
		for i := 0; wctx.Err() == nil; i++ {
			pool.Exec(wctx, "INSERT INTO users VALUES ($1)", fmt.Sprintf("w%d@x", i))
			time.Sleep(10 * time.Millisecond)
		}
	}()
	// The watch: pre1@x is in the table; no process may say otherwise.
	var checked, absent atomic.Int64
	watch := func(until time.Time) {
		for time.Now().Before(until) {
			for _, n := range []node{feeder, inst, stranger} {
				ok, err := n.rdb.Do(ctx, "BF.EXISTS", "users", "pre1@x").Bool()
				if err != nil {
					continue
				}
				checked.Add(1)
				if !ok {
					absent.Add(1)
				}
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	stream := "bg:{users}:log"
	c := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer c.Close()
	for _, forgeKey := range [][]byte{nil, []byte("a forger's key of 32 bytes......")} {
		testsvc.Eventually(t, 30*time.Second, func() bool {
			n, _ := c.XLen(ctx, stream).Result()
			return n > 0
		}, "the feeder published nothing")
		msgs, err := c.XRevRangeN(ctx, stream, "+", "-", 1).Result()
		if err != nil || len(msgs) == 0 {
			t.Fatalf("last entry: %v", err)
		}
		d, _ := msgs[0].Values["d"].(string)
		b, err := fanout.DecodeBatch([]byte(d), []byte("0123456789abcdef0123456789abcdef"))
		if err != nil {
			t.Fatalf("the feeder's entry does not verify with the key file's bytes: %v", err)
		}
		forged, err := fanout.AppendBatch(nil, fanout.Batch{Term: b.Term, Prev: b.End(), Txns: []changefeed.Txn{{
			Commit: b.End() + 1, End: b.End() + 2,
			Changes: []changefeed.Change{{Kind: changefeed.Delete, Key: []byte("pre1@x")}}}}}, forgeKey)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.XAdd(ctx, &redis.XAddArgs{Stream: stream, Values: []any{"d", forged}}).Err(); err != nil {
			t.Fatal(err)
		}
		watch(time.Now().Add(5 * time.Second))
	}
	testsvc.Eventually(t, 60*time.Second, func() bool {
		r, err := getReadyz(inst.http)
		return err == nil && r.Ready
	}, "the instance did not become ready again after the forgeries")
	watch(time.Now().Add(time.Second))
	if n := absent.Load(); n > 0 {
		t.Fatalf("FALSE NEGATIVE: pre1@x answered 0 in %d of %d lookups: a forged delete was applied", n, checked.Load())
	}
	r, err := getReadyz(stranger.http)
	if err != nil || r.Ready || !strings.Contains(r.Sets["users"].Reason, "not authenticated") {
		t.Errorf("the process with another key: /readyz %+v (%v), want not ready, saying its snapshots are not authenticated", r, err)
	}
	t.Logf("%d lookups of the row the forgeries deleted, 0 answered 0; the stranger's reason: %s", checked.Load(), r.Sets["users"].Reason)

	// A key file too short to be a key stops the server with a message.
	short := filepath.Join(dir, "short.key")
	os.WriteFile(short, []byte("tiny\n"), 0o600)
	shortConf, _ := os.ReadFile(conf("short", short, false))
	runServeFail(t, bin, string(shortConf), 10*time.Second, `set "users": fanout-key-file:`, "at least 16")
}
