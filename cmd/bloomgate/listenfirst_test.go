package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// heldProxy forwards TCP connections to upstream, but only once release is
// called: until then a connection is accepted and left waiting, as a
// database that is slow to answer (or unreachable for a while) leaves it.
type heldProxy struct {
	ln       net.Listener
	upstream string
	release  chan struct{}
	once     sync.Once
}

func newHeldProxy(t testing.TB, upstream string) *heldProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &heldProxy{ln: ln, upstream: upstream, release: make(chan struct{})}
	t.Cleanup(func() { p.Release(); ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.pipe(c)
		}
	}()
	return p
}

func (p *heldProxy) Addr() string { return p.ln.Addr().String() }

// Release lets every held and later connection through.
func (p *heldProxy) Release() { p.once.Do(func() { close(p.release) }) }

func (p *heldProxy) pipe(c net.Conn) {
	defer c.Close()
	<-p.release
	u, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer u.Close()
	go func() { io.Copy(u, c); u.(*net.TCPConn).CloseWrite() }()
	io.Copy(c, u)
}

// TestServeListensFirst: a `bloomgate serve` whose PostgreSQL does not
// answer yet (held behind a proxy) accepts connections and answers: every
// key of its set "maybe" (BF.EXISTS 1, the table's keys included: never a
// false negative while starting) and /readyz 503 with the reason
// "starting". Once the database answers, the set becomes ready and answers
// absent keys 0 and the table's keys 1.
func TestServeListensFirst(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	pg.SQL(t, "INSERT INTO users SELECT 'user' || i || '@example.com' FROM generate_series(1, 1000) i")
	proxy := newHeldProxy(t, fmt.Sprintf("%s:%d", pg.Host, pg.Port))
	dsn := strings.Replace(pg.DSN, fmt.Sprintf("%s:%d", pg.Host, pg.Port), proxy.Addr(), 1)
	conf, front, respAddr, httpAddr := writeFrontConf(t, pg, frontConfig{dsn: dsn, set: `connect-timeout 2m
answer "SELECT email FROM public.users WHERE email = $1"`})

	// Not startServe: on a server that serves only after its checks, its
	// "listening" line would never come while the database is held.
	cmd := exec.Command(bin, "serve", "-config", conf)
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	go io.Copy(io.Discard, bufio.NewReader(stdout))

	ctx := context.Background()
	// The answer must come while the database is still held: a generous
	// read timeout, not a measure of speed.
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, ReadTimeout: 30 * time.Second, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	var ping error
	testsvc.Eventually(t, 30*time.Second, func() bool {
		ping = rdb.Ping(ctx).Err()
		return ping == nil || !isRefused(ping)
	}, "RESP never accepted a connection: %v; stderr:\n%s", lazyErr(&ping), stderr)
	if ping != nil {
		t.Fatalf("PING while the database is held: %v (no answer while starting); stderr:\n%s", ping, stderr)
	}

	present := []string{"user1@example.com", "user500@example.com", "user1000@example.com"}
	absent := []string{"nobody@example.com", "user1001@example.com"}
	for _, k := range append(append([]string{}, present...), absent...) {
		got, err := rdb.Do(ctx, "BF.EXISTS", "users", k).Bool()
		if err != nil || !got {
			t.Errorf("BF.EXISTS users %s while starting = %v, %v; want 1 (maybe: not ready)", k, got, err)
		}
	}
	args := []any{"BF.MEXISTS", "users"}
	for _, k := range present {
		args = append(args, k)
	}
	if got, err := rdb.Do(ctx, args...).BoolSlice(); err != nil || len(got) != len(present) || !got[0] || !got[1] || !got[2] {
		t.Errorf("BF.MEXISTS while starting = %v, %v; want all 1", got, err)
	}
	hc := http.Client{Timeout: 30 * time.Second}
	resp, err := hc.Get("http://" + httpAddr + "/readyz")
	if err != nil {
		t.Fatalf("/readyz while starting: %v", err)
	}
	var r struct {
		readyz
		Dependencies map[string]json.RawMessage `json:"dependencies"`
	}
	err = json.NewDecoder(resp.Body).Decode(&r)
	resp.Body.Close()
	if _, ok := r.Dependencies["postgres-upstream"]; !ok {
		t.Errorf("/readyz while starting lacks the front end's upstream: %+v", r)
	}
	if err != nil || resp.StatusCode != http.StatusServiceUnavailable || r.Ready {
		t.Errorf("/readyz while starting: %d %+v (%v); want 503, not ready", resp.StatusCode, r, err)
	}
	if st, ok := r.Sets["users"]; !ok || st.Ready || st.Reason != "starting" {
		t.Errorf("/readyz while starting: set users %+v (listed: %v); want not ready with the reason \"starting\"", st, ok)
	}
	// The PostgreSQL front end relays every statement meanwhile: a row
	// that is there is found.
	fc, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&connect_timeout=30", pg.User, front, pg.Database))
	if err != nil {
		t.Fatalf("connect to the PostgreSQL front end while starting: %v", err)
	}
	defer fc.Close(ctx)
	frontFinds := func(when string) {
		t.Helper()
		for _, k := range present {
			var got string
			if err := fc.QueryRow(ctx, "SELECT email FROM public.users WHERE email = $1", k).Scan(&got); err != nil || got != k {
				t.Errorf("front end %s: %s = %q, %v; want the row", when, k, got, err)
			}
		}
		var got string
		if err := fc.QueryRow(ctx, "SELECT email FROM public.users WHERE email = $1", absent[0]).Scan(&got); !errors.Is(err, pgx.ErrNoRows) {
			t.Errorf("front end %s: %s = %q, %v; want no rows", when, absent[0], got, err)
		}
	}
	frontFinds("while starting")

	proxy.Release()
	waitReadyz(t, httpAddr, 2*time.Minute)
	for _, k := range present {
		if got, err := rdb.Do(ctx, "BF.EXISTS", "users", k).Bool(); err != nil || !got {
			t.Errorf("BF.EXISTS users %s once ready = %v, %v; want 1", k, got, err)
		}
	}
	// The filter is in use: absent keys answer 0 (a cuckoo filter at
	// 0.001 would need bad luck to say maybe for both).
	zeros := 0
	for _, k := range absent {
		if got, err := rdb.Do(ctx, "BF.EXISTS", "users", k).Bool(); err == nil && !got {
			zeros++
		}
	}
	if zeros == 0 {
		t.Errorf("no absent key answered 0 once ready; stderr:\n%s", stderr)
	}
	// A new session is served by the front end with the checked
	// statements; the session opened while starting is too, from then on
	// (its statement, prepared while relaying, once a session has taught
	// the front end the result shape).
	early := fc
	frontFinds("once ready, a session from before")
	fc2, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/%s?sslmode=disable&connect_timeout=30", pg.User, front, pg.Database))
	if err != nil {
		t.Fatalf("connect to the PostgreSQL front end once ready: %v", err)
	}
	defer fc2.Close(ctx)
	fc = fc2
	frontFinds("once ready")
	frontFinds("once ready, again")
	answered := func() float64 { return (&pgFront{httpAddr: httpAddr}).metric(t, "bloomgate_pgwire_answered_total") }
	n := answered()
	if n == 0 {
		t.Errorf("the front end answered nothing itself once ready (bloomgate_pgwire_answered_total 0)")
	}
	fc = early
	frontFinds("once ready, the session from before, again")
	if m := answered(); m <= n {
		t.Errorf("the session opened while starting was not answered by the front end once ready (bloomgate_pgwire_answered_total %v, then %v)", n, m)
	}
}

func isRefused(err error) bool {
	return strings.Contains(err.Error(), "connection refused")
}

type errString struct{ p *error }

func (e errString) String() string {
	if *e.p == nil {
		return "<nil>"
	}
	return (*e.p).Error()
}

func lazyErr(p *error) fmt.Stringer { return errString{p} }

// TestServeLoadsSnapshotWhileConnecting: a restarting `bloomgate serve`
// loads its followed set's snapshot from the data directory while its
// PostgreSQL does not answer yet (the load reads no database), and the
// loaded filter does not answer "absent" until the set has caught up: a
// row inserted while the server was down, which the snapshot lacks, is
// "maybe" while the database is held, and present once ready.
func TestServeLoadsSnapshotWhileConnecting(t *testing.T) {
	t.Parallel() // a cluster and servers of its own
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	pg.SQL(t, "INSERT INTO users SELECT 'user' || i || '@example.com' FROM generate_series(1, 1000) i")
	proxy := newHeldProxy(t, fmt.Sprintf("%s:%d", pg.Host, pg.Port))
	held := strings.Replace(pg.DSN, fmt.Sprintf("%s:%d", pg.Host, pg.Port), proxy.Addr(), 1)
	conf, respAddr, httpAddr, _ := followConf(t, pg.DSN, "  connect-timeout 2m\n")

	srv := startServe(t, bin, "-config", conf)
	waitReadyz(t, httpAddr, 2*time.Minute)
	srv.cmd.Process.Signal(syscall.SIGTERM) // its last snapshot
	if err := srv.wait(); err != nil {
		t.Fatalf("first run: %v\n%s", err, srv.stderr)
	}
	pg.SQL(t, "INSERT INTO users VALUES ('late@example.com')")
	b, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, []byte(strings.Replace(string(b), pg.DSN, held, 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	srv = startServe(t, bin, "-config", conf)
	defer func() { srv.cmd.Process.Kill(); srv.wait() }()
	testsvc.Eventually(t, time.Minute, func() bool { return strings.Contains(srv.stderr.String(), "bloomgate: snapshot loaded") },
		"the snapshot was not loaded while the database was held; stderr:\n%s", srv.stderr)
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: respAddr})
	defer rdb.Close()
	for _, k := range []string{"late@example.com", "user1@example.com", "nobody@example.com"} {
		if got, err := rdb.Do(ctx, "BF.EXISTS", "users", k).Bool(); err != nil || !got {
			t.Errorf("BF.EXISTS users %s with the snapshot loaded, the database held = %v, %v; want 1 (maybe: not ready)", k, got, err)
		}
	}
	if r, err := getReadyz(httpAddr); err != nil || r.Ready {
		t.Errorf("/readyz with the database held: %+v, %v; want not ready", r, err)
	}
	proxy.Release()
	waitReadyz(t, httpAddr, 2*time.Minute)
	if got, err := rdb.Do(ctx, "BF.EXISTS", "users", "late@example.com").Bool(); err != nil || !got {
		t.Errorf("BF.EXISTS users late@example.com once ready = %v, %v; want 1", got, err)
	}
	if strings.Contains(srv.stderr.String(), "bootstrapping") {
		t.Errorf("the restart bootstrapped instead of loading its snapshot; stderr:\n%s", srv.stderr)
	}
}
