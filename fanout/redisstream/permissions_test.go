package redisstream_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout/redisstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// docACLs returns the ACL SETUSER commands of docs/operations.md ("Fan-out
// permissions") for set, with the users' passwords set to their names, so
// that the test runs exactly what the operator is told.
func docACLs(t *testing.T, set string) (feeder, instance []string) {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(doc), "\n## Fan-out permissions\n")
	if !ok {
		t.Fatal(`docs/operations.md has no "## Fan-out permissions" section`)
	}
	sec, _, _ = strings.Cut(sec, "\n## ")
	sec = strings.NewReplacer("{S}", "{"+set+"}", "FEEDER-PASSWORD", "bg-feeder", "INSTANCE-PASSWORD", "bg-instance").Replace(sec)
	for _, l := range strings.Split(sec, "\n") {
		f := strings.Fields(l)
		if len(f) < 3 || f[0] != "ACL" || f[1] != "SETUSER" {
			continue
		}
		switch f[2] {
		case "bg-feeder":
			feeder = f
		case "bg-instance":
			instance = f
		}
	}
	if feeder == nil || instance == nil {
		t.Fatal("docs/operations.md, Fan-out permissions: no ACL SETUSER bg-feeder and bg-instance lines")
	}
	return feeder, instance
}

// startACLRedis starts a private redis-server with the docs' users
// bg-feeder and bg-instance for set, and returns its address; the default
// user stays the test's administrator. The test's cleanup kills it.
func startACLRedis(t *testing.T, set string) string {
	t.Helper()
	bin := testsvc.Binary(t, "redis-server")
	feeder, instance := docACLs(t, set)
	dir := t.TempDir()
	for attempt := 0; ; attempt++ {
		_, port, _ := net.SplitHostPort(testsvc.FreeAddr(t))
		log := filepath.Join(dir, fmt.Sprint("redis", attempt, ".log"))
		cmd := exec.Command(bin, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--logfile", log)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan struct{})
		go func() { cmd.Wait(); close(exited) }()
		t.Cleanup(func() { cmd.Process.Kill(); <-exited })
		addr := "127.0.0.1:" + port
		admin := redis.NewClient(&redis.Options{Addr: addr})
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := admin.Ping(context.Background()).Err()
			if err == nil {
				break
			}
			select {
			case <-exited:
				b, _ := os.ReadFile(log)
				if attempt == 2 {
					t.Fatalf("redis-server exited: %s", b)
				}
			default:
				if time.Now().After(deadline) {
					t.Fatalf("redis-server not ready after 30 s: %v", err)
				}
				time.Sleep(20 * time.Millisecond)
				continue
			}
			break
		}
		select {
		case <-exited:
			admin.Close()
			continue // the port was taken meanwhile: another one
		default:
		}
		for _, acl := range [][]string{feeder, instance} {
			args := make([]any, len(acl))
			for i, a := range acl {
				args[i] = a
			}
			if err := admin.Do(context.Background(), args...).Err(); err != nil {
				t.Fatalf("%s: %v", strings.Join(acl, " "), err)
			}
		}
		admin.Close()
		t.Logf("redis-server with the docs' users:\n%s\n%s", strings.Join(feeder, " "), strings.Join(instance, " "))
		return addr
	}
}

// TestDocumentedACLs runs a feeder and an instance of a set as the Redis
// users docs/operations.md gives them: the instance joins from the feeder's
// snapshot and follows new rows with no command refused along the way, and
// the instance's user can write none of the set's keys.
func TestDocumentedACLs(t *testing.T) {
	var b [4]byte
	crand.Read(b[:])
	name := "p" + hex.EncodeToString(b[:])
	addr := startACLRedis(t, name)
	pg := fanouttest.NewPG(t, 20000)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { admin.Close() })
	dial := func(user string) redis.UniversalClient {
		c, err := redisstream.Dial(ctx, "redis://"+user+":"+user+"@"+addr+"/0", 0)
		if err != nil {
			t.Fatalf("%s: %v", user, err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}

	fset, err := redisstream.Open(ctx, redisstream.Config{Client: dial("bg-feeder"), Set: name, LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("feeder: Open: %v", err)
	}
	runFeeder(t, fset, pg, "feeder")

	iset, err := redisstream.Open(ctx, redisstream.Config{Client: dial("bg-instance"), Set: name, LeaseTTL: time.Second})
	if err != nil {
		t.Fatalf("instance: Open: %v", err)
	}
	// An instance never scans: the rows it has come from the feeder's
	// snapshot (its gate has a Source only because bloomgate.New asks).
	g, _ := instance(t, iset, pg)
	for i := 1; i <= 20000; i += 997 {
		if k := fmt.Sprintf("pre%d@x", i); !g.MayContain([]byte(k)) {
			t.Fatalf("the ready instance lacks %s, a row of the feeder's snapshot", k)
		}
	}
	checkRows := func(prefix string) {
		t.Helper()
		var tok changefeed.Position
		for i := range 50 {
			if tok, err = pg.Insert(ctx, fmt.Sprintf("%s%d@x", prefix, i)); err != nil {
				t.Fatal(err)
			}
		}
		testsvc.Eventually(t, time.Minute, func() bool { return g.Position() >= tok }, "the instance did not apply %s", tok)
		for i := range 50 {
			if k := fmt.Sprintf("%s%d@x", prefix, i); !g.MayContain([]byte(k)) {
				t.Fatalf("false negative: %s, inserted after the instance joined", k)
			}
		}
	}
	checkRows("new")
	if log, err := admin.Do(ctx, "ACL", "LOG").Slice(); err != nil || len(log) > 0 {
		t.Fatalf("the documented ACLs refused the feeder or the instance (ACL LOG): %v %v", log, err)
	}

	// Every write of the set's keys, as the instance's user.
	ic := dial("bg-instance")
	p := "bg:{" + name + "}:"
	objects, err := admin.SMembers(ctx, p+"objects").Result()
	if err != nil || len(objects) == 0 {
		t.Fatalf("the set's objects: %v %v", objects, err)
	}
	forged := "forged " + name
	for _, cmd := range [][]any{
		{"XADD", p + "log", "*", "d", forged},
		{"XTRIM", p + "log", "MAXLEN", "0"},
		{"XDEL", p + "log", "0-1"},
		{"SET", p + "lease", forged},
		{"SET", p + "term", "1"},
		{"INCR", p + "term"},
		{"PEXPIRE", p + "lease", "1"},
		{"SET", p + "kv:head", forged},
		{"HSET", p + "kv:head", "v", forged},
		{"HSET", p + "kv:snapshot", "v", forged},
		{"SET", p + "obj:" + objects[0] + ":0", forged},
		{"SET", p + "obj:" + objects[0], "1"},
		{"SADD", p + "objects", forged},
		{"SET", p + "config", forged},
		{"SET", p + "forged", forged},
		{"DEL", p + "log"},
		{"DEL", p + "kv:head"},
		{"DEL", p + "kv:snapshot"},
		{"DEL", p + "lease"},
		{"UNLINK", p + "obj:" + objects[0]},
		{"RENAME", p + "kv:snapshot.prev", p + "kv:snapshot"},
		{"COPY", p + "kv:snapshot.prev", p + "kv:snapshot", "REPLACE"},
		{"RESTORE", p + "forged", "0", forged},
		{"EVAL", "return redis.call('HSET', KEYS[1], 'v', ARGV[1])", "1", p + "kv:head", forged},
		{"FUNCTION", "LOAD", "#!lua name=forged\nredis.register_function('f', function(k, a) return redis.call('DEL', k[1]) end)"},
		{"FLUSHDB"},
		{"FLUSHALL"},
		{"MULTI"},
	} {
		err := ic.Do(ctx, cmd...).Err()
		if err == nil {
			t.Errorf("the instance's user could %v", cmd[:min(2, len(cmd))])
			continue
		}
		t.Logf("refused: %v: %v", cmd[:min(2, len(cmd))], err)
	}
	// Nor may the feeder's user empty the database (the key patterns do not
	// cover commands without keys).
	for _, cmd := range [][]any{{"FLUSHDB"}, {"FLUSHALL"}, {"KEYS", "*"}} {
		if err := dial("bg-feeder").Do(ctx, cmd...).Err(); err == nil {
			t.Errorf("the feeder's user could %v", cmd[0])
		} else {
			t.Logf("refused to the feeder: %v: %v", cmd[0], err)
		}
	}
	// None of it landed.
	if n, err := admin.Exists(ctx, p+"forged").Result(); err != nil || n != 0 {
		t.Fatalf("a forged key: %d %v", n, err)
	}
	entries, err := admin.XRange(ctx, p+"log", "-", "+").Result()
	if err != nil || len(entries) == 0 {
		t.Fatalf("the log: %d entries, %v", len(entries), err)
	}
	for _, e := range entries {
		if e.Values["d"] == forged {
			t.Fatalf("a forged entry landed in the log: %s", e.ID)
		}
	}
	for _, k := range []string{"kv:head", "kv:snapshot"} {
		if v, err := admin.HGet(ctx, p+k, "v").Result(); err != nil || v == forged {
			t.Fatalf("%s: %q %v", k, v, err)
		}
	}
	if v, err := admin.Get(ctx, p+"lease").Result(); err != nil || strings.Contains(v, forged) {
		t.Fatalf("the lease: %q %v", v, err)
	}
	if ok, err := admin.SIsMember(ctx, p+"objects", forged).Result(); err != nil || ok {
		t.Fatalf("a forged object name: %v %v", ok, err)
	}
	// The instance goes on: it still sees every new row.
	checkRows("after")
}
