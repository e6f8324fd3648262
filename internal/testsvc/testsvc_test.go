package testsvc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

const childEnv = "BLOOMGATE_TESTSVC_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) == "1" {
		// A test binary that dies without stopping its cluster.
		c, err := newCluster(nil)
		if err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		fmt.Println(c.root, c.proc.Pid)
		syscall.Kill(os.Getpid(), syscall.SIGKILL)
	}
	Main(m)
}

func TestLogicalPostgres(t *testing.T) {
	a, b := LogicalPostgres(t), LogicalPostgres(t)
	if a.Database == b.Database || a.DSN == b.DSN {
		t.Fatalf("two calls gave the same database %s", a.DSN)
	}
	if a.Port != b.Port || a.DataDir != b.DataDir {
		t.Fatalf("two calls started two clusters: %+v %+v", a, b)
	}
	got := strings.Fields(a.SQL(t, "SHOW wal_level", "SHOW max_replication_slots", "SHOW max_wal_senders", "SHOW listen_addresses", "SELECT current_database()"))
	want := []string{"logical", "64", "64", "127.0.0.1", a.Database}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("settings %q, want %q", got, want)
	}
	a.SQL(t, "CREATE TABLE only_in_a (k text)")
	if out := b.SQL(t, "SELECT count(*) FROM pg_tables WHERE tablename = 'only_in_a'"); strings.TrimSpace(out) != "0" {
		t.Fatalf("a table of one database is visible in the other: %q", out)
	}
}

func TestLogicalPostgresDropsDatabase(t *testing.T) {
	var name string
	var admin *PG
	t.Run("inner", func(t *testing.T) {
		p := LogicalPostgres(t)
		p.SQL(t, "SELECT pg_create_logical_replication_slot('left_behind', 'pgoutput')")
		name, admin = p.Database, p
	})
	out := admin.c.pg("postgres").SQL(t, "SELECT count(*) FROM pg_database WHERE datname = '"+name+"'",
		"SELECT count(*) FROM pg_replication_slots WHERE database = '"+name+"'")
	if strings.Join(strings.Fields(out), " ") != "0 0" {
		t.Fatalf("database %s or its slot left after the test: %q", name, out)
	}
}

func TestSharedClusterRefusesKill(t *testing.T) {
	p := LogicalPostgres(t)
	ft := &fakeTB{TB: t}
	runFake(func() { p.Kill(ft) })
	if !ft.failed || !strings.Contains(ft.msg, "shared") {
		t.Fatalf("Kill on the shared cluster: failed=%v %q", ft.failed, ft.msg)
	}
}

func TestNewPostgresKillRestart(t *testing.T) {
	var root string
	t.Run("own", func(t *testing.T) { root = killRestart(t) })
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Errorf("cluster directory %s left behind: %v", root, err)
	}
}

func killRestart(t *testing.T) (root string) {
	p := NewPostgres(t, PGOptions{Settings: map[string]string{"max_slot_wal_keep_size": "64MB"}})
	if got := strings.TrimSpace(p.SQL(t, "SHOW max_slot_wal_keep_size")); got != "64MB" {
		t.Fatalf("max_slot_wal_keep_size = %q", got)
	}
	p.SQL(t, "CREATE TABLE kept (k int)", "INSERT INTO kept VALUES (1)")
	pm := p.c.proc.Pid
	p.Kill(t)
	if alive(pm) {
		t.Fatalf("postmaster %d alive after Kill", pm)
	}
	p.Start(t)
	// Committed before the kill, so it survives crash recovery.
	p.SQL(t, "INSERT INTO kept VALUES (2)")
	p.Restart(t)
	if got := strings.TrimSpace(p.SQL(t, "SELECT string_agg(k::text, ',' ORDER BY k) FROM kept")); got != "1,2" {
		t.Fatalf("after kill and restart: rows %q, want 1,2", got)
	}
	port := p.Port
	p.Stop(t)
	if p.c.ready() {
		t.Fatal("still accepting connections after Stop")
	}
	p.Start(t)
	if p.Port != port || !p.c.ready() {
		t.Fatal("not back on the same port after Start")
	}
	return p.c.root
}

// A test binary that dies (a panic, kill -9) takes its postmaster with it,
// and the next binary deletes what it left.
func TestDeadBinaryLeavesNothing(t *testing.T) {
	Short(t, "starts a second test binary")
	if _, err := binDir(); err != nil {
		Unavailable(t, "%v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, _ := cmd.Output()
	f := strings.Fields(strings.TrimSpace(string(out)))
	if len(f) != 2 {
		t.Fatalf("child printed %q", out)
	}
	root := f[0]
	pm, _ := strconv.Atoi(f[1])
	Eventually(t, 30*time.Second, func() bool { return !alive(pm) }, "postmaster %d of a killed test binary still running", pm)
	if _, err := os.Stat(root); err != nil {
		t.Fatalf("expected the dead binary's directory to be there before reaping: %v", err)
	}
	reapStale(baseDir())
	if _, err := os.Stat(root); !os.IsNotExist(err) {
		t.Fatalf("%s not reaped: %v", root, err)
	}
}

func TestReapKeepsLiveOwners(t *testing.T) {
	me, err := procStart(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	mine := filepath.Join(base, fmt.Sprintf("%d-%s-x", os.Getpid(), me))
	reused := filepath.Join(base, fmt.Sprintf("%d-%s1-x", os.Getpid(), me)) // same pid, other start time
	other := filepath.Join(base, "notours")
	for _, d := range []string{mine, reused, other} {
		os.Mkdir(d, 0o755)
	}
	reapStale(base)
	for d, want := range map[string]bool{mine: true, reused: false, other: true} {
		_, err := os.Stat(d)
		if got := err == nil; got != want {
			t.Errorf("%s: exists %v, want %v", filepath.Base(d), got, want)
		}
	}
}

func TestUnavailablePolicy(t *testing.T) {
	for _, req := range []string{"", "0", "1"} {
		t.Setenv(EnvRequire, req)
		ft := &fakeTB{TB: t}
		runFake(func() { Unavailable(ft, "thing at %s down", "here") })
		if ft.failed != (req == "1") || ft.skipped != (req != "1") || !strings.Contains(ft.msg, "thing at here down") {
			t.Errorf("%s=%q: failed=%v skipped=%v %q", EnvRequire, req, ft.failed, ft.skipped, ft.msg)
		}
	}
}

func TestSharedServersUnreachable(t *testing.T) {
	t.Setenv(EnvRequire, "")
	t.Setenv(EnvPostgres, "postgres://postgres@127.0.0.1:1/postgres")
	t.Setenv(EnvRedis, "127.0.0.1:1")
	t.Setenv(EnvNATS, "nats://127.0.0.1:1")
	for name, f := range map[string]func(testing.TB) string{"Postgres": Postgres, "Redis": Redis, "NATS": NATS} {
		ft := &fakeTB{TB: t}
		runFake(func() { f(ft) })
		if !ft.skipped || !strings.Contains(ft.msg, "127.0.0.1:1") {
			t.Errorf("%s on a closed port: skipped=%v %q", name, ft.skipped, ft.msg)
		}
	}
}

func TestPGAddr(t *testing.T) {
	for in, want := range map[string]string{
		DefaultPostgres:                         "127.0.0.1:5432",
		"postgres://u@db.example:6543/x":        "db.example:6543",
		"postgresql:///x?host=/tmp":             "127.0.0.1:5432",
		"host=10.0.0.1 port=5433 user=postgres": "10.0.0.1:5433",
		"dbname=x":                              "127.0.0.1:5432",
	} {
		if got := pgAddr(in); got != want {
			t.Errorf("pgAddr(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestEventually(t *testing.T) {
	n := 0
	Eventually(t, time.Minute, func() bool { n++; return n == 3 }, "never")
	if n != 3 {
		t.Fatalf("cond called %d times, want 3", n)
	}
	ft := &fakeTB{TB: t}
	start := time.Now()
	runFake(func() { Eventually(ft, 100*time.Millisecond, func() bool { return false }, "key %q absent", "k") })
	if el := time.Since(start); !ft.failed || el < 100*time.Millisecond || !strings.Contains(ft.msg, `key "k" absent`) {
		t.Fatalf("failed=%v after %v: %q", ft.failed, el, ft.msg)
	}
}

// fakeTB records how a helper ended the test instead of ending it.
type fakeTB struct {
	testing.TB
	mu              sync.Mutex
	failed, skipped bool
	msg             string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatal(args ...any) {
	f.end(&f.failed, fmt.Sprint(args...))
}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.end(&f.failed, fmt.Sprintf(format, args...))
}
func (f *fakeTB) Skipf(format string, args ...any) {
	f.end(&f.skipped, fmt.Sprintf(format, args...))
}
func (f *fakeTB) end(flag *bool, msg string) {
	f.mu.Lock()
	*flag, f.msg = true, msg
	f.mu.Unlock()
	panic(fakeEnd{})
}

type fakeEnd struct{}

// runFake runs f, which ends by a call on a fakeTB.
func runFake(f func()) {
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(fakeEnd); !ok {
				panic(r)
			}
		}
	}()
	f()
}

func TestNATSCluster(t *testing.T) {
	Short(t, "starts a 3-node NATS cluster")
	c := NewNATSCluster(t)
	if got := strings.Count(c.URLs(), "nats://127.0.0.1:"); got != 3 {
		t.Fatalf("URLs() = %q, want three loopback URLs", c.URLs())
	}
	c.Kill(1)
	if c.healthy(1) {
		t.Fatal("a killed node still answers its health check")
	}
	c.Start(1) // fails the test unless n1 is healthy again
	for i := range 3 {
		if !c.healthy(i) {
			t.Fatalf("node n%d not healthy after the restart: %s", i, c.Log(i))
		}
	}
}

// TestFreePort: ports are bindable, below the ephemeral range (so no
// outgoing connection can take one as its source port before the server
// binds it), and never handed out twice.
func TestFreePort(t *testing.T) {
	_, hi := pickRange()
	seen := map[int]bool{}
	for range 200 {
		p, err := FreePort()
		if err != nil {
			t.Fatal(err)
		}
		if seen[p] {
			t.Fatalf("port %d handed out twice", p)
		}
		seen[p] = true
		if hi-10000 >= 1000 && p >= hi {
			t.Fatalf("port %d is in the ephemeral range (from %d)", p, hi)
		}
		l, err := net.Listen("tcp", FreeAddr(t))
		if err != nil {
			t.Fatalf("a free address cannot be bound: %v", err)
		}
		l.Close()
	}
}
