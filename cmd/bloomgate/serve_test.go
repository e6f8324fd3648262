package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/demo"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

var (
	buildOnce sync.Once
	binDir    string
	binPath   string
	buildErr  error
)

// asCommandEnv makes the test binary run main, the bloomgate command: the
// binary buildBinary gives is this test binary under that variable, which
// saves building and linking the command once more (several seconds of
// CPU on the project's machine).
const asCommandEnv = "BLOOMGATE_TEST_AS_COMMAND"

func TestMain(m *testing.M) {
	if os.Getenv(asCommandEnv) == "1" {
		main() // exits
	}
	// The parallel tests mostly wait (on real expiries, on the servers and
	// clients they start), so without -parallel they run 4 at a time
	// rather than GOMAXPROCS (2 on the project's machine).
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", "4")
	}
	testsvc.Main(m, func() {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
	})
}

// buildBinary returns the path of a bloomgate command in a temporary
// directory, made once per test binary: a script that runs this test binary
// as the command (asCommandEnv); or one built with go build under the race
// detector, so that the servers run at full speed there, and when
// benchmarks run, so that they measure the command as users build it.
func buildBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "bloomgate-serve-test")
		if buildErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "bloomgate")
		if bench := flag.Lookup("test.bench"); !raceEnabled && (bench == nil || bench.Value.String() == "") {
			exe, err := os.Executable()
			if err != nil {
				buildErr = err
				return
			}
			script := fmt.Sprintf("#!/bin/sh\n%s=1 exec '%s' \"$@\"\n", asCommandEnv, strings.ReplaceAll(exe, "'", `'\''`))
			buildErr = os.WriteFile(binPath, []byte(script), 0o755)
			return
		}
		out, err := exec.Command("go", "build", "-o", binPath, ".").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

// freeAddr returns a loopback address that was free a moment ago.
func freeAddr(t testing.TB) string { t.Helper(); return testsvc.FreeAddr(t) }

// serveConf writes dir/bloomgate.conf: RESP and HTTP on free loopback
// addresses, data in dir/data, then body (sets, settings).
func serveConf(t testing.TB, dir, body string) (path, respAddr, httpAddr string) {
	t.Helper()
	respAddr, httpAddr = freeAddr(t), freeAddr(t)
	path = filepath.Join(dir, "bloomgate.conf")
	conf := fmt.Sprintf("resp %s\nhttp %s\ndata %s\n%s", respAddr, httpAddr, filepath.Join(dir, "data"), body)
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, respAddr, httpAddr
}

// server is a running `bloomgate serve` process.
type server struct {
	cmd    *exec.Cmd
	stderr *syncBuffer
	done   chan struct{} // closed when the process has exited
	ready  chan struct{} // closed when it printed "ready" (after "listening")
	err    error         // its exit status, once done is closed
}

// wait waits for the process to exit and returns its exit status.
func (s *server) wait() error {
	<-s.done
	return s.err
}

// startServe runs `bloomgate serve args…` and waits for its ready line.
func startServe(t testing.TB, bin string, args ...string) *server {
	t.Helper()
	return startCmd(t, exec.Command(bin, append([]string{"serve"}, args...)...))
}

// startCmd starts cmd, a `bloomgate serve` command line, and waits for its
// ready line.
func startCmd(t testing.TB, cmd *exec.Cmd) *server {
	t.Helper()
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	s := &server{cmd: cmd, stderr: &syncBuffer{}, done: make(chan struct{}), ready: make(chan struct{})}
	cmd.Stderr = s.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil || !strings.Contains(line, "listening") {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("server did not start (%q, %v); stderr:\n%s", line, err, s.stderr)
	}
	go func() {
		for {
			line, err := br.ReadString('\n')
			if err != nil {
				return
			}
			if strings.Contains(line, "bloomgate serve: ready") {
				close(s.ready)
			}
		}
	}()
	go func() {
		s.err = cmd.Wait()
		close(s.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		s.wait()
	})
	return s
}

// syncBuffer collects a process's stderr; the copying goroutine writes while
// the test reads, so both take the lock.
type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestKill9 kills the server with SIGKILL in the middle of a write load and
// checks, after a restart, that every acknowledged add is there. Every write
// reaches the operating system (write(2)) before it is acknowledged under
// all three fsync policies, so a crash of the process alone loses nothing;
// the policies differ only when the machine crashes.
func TestKill9(t *testing.T) {
	t.Parallel()
	bin := buildBinary(t)
	for _, policy := range []string{"always", "everysec"} {
		t.Run(policy, func(t *testing.T) {
			dir := t.TempDir()
			addr := freeAddr(t)
			args := []string{"-resp", addr, "-http", "", "-data", dir, "-appendfsync", policy}
			srv := startServe(t, bin, args...)
			acked := writeUntilKilled(t, addr, srv)
			startServe(t, bin, args...)
			rdb := redis.NewClient(&redis.Options{Addr: addr})
			defer rdb.Close()
			ctx := context.Background()
			lost := 0
			for key, items := range acked {
				cmd := "BF.MEXISTS"
				if strings.HasPrefix(key, "cf") {
					cmd = "CF.MEXISTS"
				}
				args := []any{cmd, key}
				for _, it := range items {
					args = append(args, it)
				}
				res, err := rdb.Do(ctx, args...).BoolSlice()
				if err != nil {
					t.Fatal(err)
				}
				for i, ok := range res {
					if !ok {
						lost++
						if lost < 5 {
							t.Errorf("%s lost acknowledged item %s", key, items[i])
						}
					}
				}
			}
			n := 0
			for _, items := range acked {
				n += len(items)
			}
			t.Logf("%d acknowledged adds, %d lost", n, lost)
			if lost > 0 {
				t.Fatalf("%d of %d acknowledged adds lost", lost, n)
			}
		})
	}
}

// writeUntilKilled runs writers against the server, kills it with SIGKILL
// once they have 2000 acknowledged adds, and returns every acknowledged add
// by key.
func writeUntilKilled(t *testing.T, addr string, srv *server) map[string][]string {
	var mu sync.Mutex
	acked := map[string][]string{}
	total := 0
	killed := make(chan struct{})
	var once sync.Once
	kill := func() {
		once.Do(func() {
			close(killed) // first: a writer that sees the connection drop must know why
			srv.cmd.Process.Signal(syscall.SIGKILL)
		})
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
			defer rdb.Close()
			key := fmt.Sprintf("bf%d", w)
			cmd := "BF.ADD"
			if w%2 == 1 {
				key, cmd = fmt.Sprintf("cf%d", w), "CF.ADD"
			}
			for i := 0; ; i++ {
				item := fmt.Sprintf("item-%d-%d", w, i)
				if err := rdb.Do(context.Background(), cmd, key, item).Err(); err != nil {
					select {
					case <-killed:
						return
					default:
						t.Errorf("write before the kill failed: %v", err)
						kill()
						return
					}
				}
				mu.Lock()
				acked[key] = append(acked[key], item)
				total++
				if total == 2000 {
					kill()
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	srv.wait()
	return acked
}

// TestServeSIGTERM: SIGTERM finishes, snapshots and exits 0; the filters are
// there after a restart.
func TestServeSIGTERM(t *testing.T) {
	t.Parallel() // a server and data directory of its own
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	args := []string{"-resp", addr, "-http", "", "-data", dir}
	srv := startServe(t, bin, args...)
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.BFAdd(ctx, "k", "a").Err(); err != nil {
		t.Fatal(err)
	}
	srv.cmd.Process.Signal(syscall.SIGTERM)
	if err := srv.wait(); err != nil {
		t.Fatalf("exit after SIGTERM: %v; stderr:\n%s", err, srv.stderr)
	}
	if snaps, _ := filepath.Glob(filepath.Join(dir, "snapshot-*.bgs")); len(snaps) == 0 {
		t.Errorf("no snapshot after SIGTERM")
	}
	startServe(t, bin, args...)
	if ok, err := rdb.BFExists(ctx, "k", "a").Result(); !ok || err != nil {
		t.Errorf("after restart: %v, %v", ok, err)
	}
}

// TestProtectedMode: a non-loopback address without a password refuses to
// start.
func TestProtectedMode(t *testing.T) {
	t.Parallel() // a process of its own
	bin := buildBinary(t)
	out, err := exec.Command(bin, "serve", "-resp", "0.0.0.0:0", "-http", "", "-data", "").CombinedOutput()
	if err == nil || !strings.Contains(string(out), "protected mode") {
		t.Errorf("serve on 0.0.0.0 without a password: %v\n%s", err, out)
	}
}

// sqliteUsers writes dir/app.db with a users table holding u0..u(n-1)
// @example.com and returns its path.
func sqliteUsers(t *testing.T, dir string, n int) string {
	t.Helper()
	dbPath := filepath.Join(dir, "app.db")
	db, err := sqlite.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	users := demo.SQLiteUsers{DB: db, Table: "users"}
	ctx := context.Background()
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := users.Load(ctx, n, func(i int) string { return fmt.Sprintf("u%d@example.com", i) }); err != nil {
		t.Fatal(err)
	}
	return dbPath
}

// TestServeConfigSQLiteSet starts the binary with a config file declaring an
// SQLite-backed set with a confirm query.
func TestServeConfigSQLiteSet(t *testing.T) {
	t.Parallel() // a server and database of its own
	bin := buildBinary(t)
	dir := t.TempDir()
	dbPath := sqliteUsers(t, dir, 100)
	ctx := context.Background()
	conf, respAddr, httpAddr := serveConf(t, dir, fmt.Sprintf(`requirepass pw
set users {
  sqlite %s
  follow no
  query SELECT email FROM users
  confirm SELECT 1 FROM users WHERE email = ?
}
`, dbPath))
	srv := startServe(t, bin, "-config", conf)
	// "ready" on stdout comes when /readyz says so, not when it listens.
	select {
	case <-srv.ready:
	case <-time.After(30 * time.Second):
		t.Fatal(`no "ready" line on stdout within 30 s`)
	}
	if resp, err := http.Get("http://" + httpAddr + "/readyz"); err != nil || resp.StatusCode != 200 {
		t.Fatalf(`/readyz after the "ready" line: %v %v`, resp, err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, Password: "pw"})
	defer rdb.Close()
	for _, tt := range []struct {
		key  string
		want bool
	}{{"u5@example.com", true}, {"nobody@example.com", false}} {
		got, err := rdb.Do(ctx, "BG.EXISTS", "users", tt.key).Bool()
		if err != nil || got != tt.want {
			t.Errorf("BG.EXISTS users %s = %v, %v", tt.key, got, err)
		}
	}
	if ok, err := rdb.BFExists(ctx, "users", "u7@example.com").Result(); !ok || err != nil {
		t.Errorf("BF.EXISTS on the set = %v, %v", ok, err)
	}
	// The HTTP API wants the password as a bearer token.
	for token, want := range map[string]int{"": 401, "pw": 200} {
		req, _ := http.NewRequest("GET", "http://"+httpAddr+"/v1/sets/users", nil)
		if token != "" {
			req.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET /v1/sets/users with token %q: %d, want %d", token, resp.StatusCode, want)
		}
	}
}

// TestServeConfigUnknownKey: an unknown key stops the start, naming the key
// and its line.
func TestServeConfigUnknownKey(t *testing.T) {
	t.Parallel() // a process of its own
	bin := buildBinary(t)
	conf := filepath.Join(t.TempDir(), "bad.conf")
	os.WriteFile(conf, []byte("resp 127.0.0.1:0\n\nmaxmemroy 1gb\n"), 0o644)
	out, err := exec.Command(bin, "serve", "-config", conf).CombinedOutput()
	if err == nil || !strings.Contains(string(out), `line 3: unknown key "maxmemroy"`) {
		t.Errorf("unknown key: %v\n%s", err, out)
	}
}

// TestServePreAuthConfig: preauth-maxclients and preauth-timeout from the
// config file bound the connections that have not authenticated: past the
// limit the oldest is closed, and an idle one is closed after the timeout
// (10 s by default; here 300 ms, so a close seen within 5 s is the
// setting's).
func TestServePreAuthConfig(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	addr := freeAddr(t)
	conf := filepath.Join(dir, "bloomgate.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf("resp %s\nrequirepass s3cret\npreauth-maxclients 2\npreauth-timeout 300ms\nauth-failure-delay 10ms\n", addr)), 0o644)
	startServe(t, bin, "-config", conf, "-http", "", "-data", "")

	closedWithin := func(c net.Conn, d time.Duration) bool {
		c.SetReadDeadline(time.Now().Add(d))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return err != nil && !(errors.As(err, &ne) && ne.Timeout())
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	// Past the limit: the oldest of three strangers is closed at once.
	a, b := dial(), dial()
	time.Sleep(50 * time.Millisecond) // a and b accepted before c
	dial()
	if !closedWithin(a, 200*time.Millisecond) {
		t.Error("preauth-maxclients 2: the oldest of three unauthenticated connections was not closed")
	}
	// The timeout: b, idle, is closed well before the 10 s default.
	if !closedWithin(b, 5*time.Second) {
		t.Error("preauth-timeout 300ms: an idle unauthenticated connection was still open after 5 s")
	}
	// A client with the password is unaffected.
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: "s3cret"})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Fatalf("PING with the password: %v", err)
	}
}
