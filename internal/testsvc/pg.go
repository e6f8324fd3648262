package testsvc

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// PGOptions configures a private cluster from NewPostgres. The zero value
// is a cluster like LogicalPostgres's.
type PGOptions struct {
	// Settings are server settings (name → value) passed to postgres as
	// -c name=value, over the defaults: wal_level=logical,
	// max_replication_slots=64, max_wal_senders=64, max_connections=200,
	// fsync=off, full_page_writes=off (both lose nothing when only the
	// server process dies), shared_buffers=32MB, listening on 127.0.0.1
	// only.
	Settings map[string]string
}

// PG is a PostgreSQL server a test connects to: a database on a private
// cluster. User postgres connects with trust authentication.
type PG struct {
	// DSN is the connection URL of Database.
	DSN string
	// Host and Port are where the cluster listens (TCP on loopback).
	Host string
	Port int
	// Database is the database DSN names; User the superuser.
	Database, User string
	// DataDir is the cluster's data directory; SocketDir holds its unix
	// socket.
	DataDir, SocketDir string

	c *cluster
}

// LogicalPostgres returns a fresh database, dropped when the test ends, on a
// private cluster with wal_level=logical that this test binary shares: the
// cluster starts on the first call (a copy of the machine's initdb template
// started on a free loopback port) and stops in Main, which the package's TestMain must
// call. Do not stop, kill or restart it (NewPostgres gives a test a cluster
// of its own for that). Without the PostgreSQL server binaries the test
// skips or fails by the policy of Unavailable.
func LogicalPostgres(t testing.TB) *PG {
	t.Helper()
	if !mainActive.Load() {
		t.Fatal("testsvc.LogicalPostgres needs `func TestMain(m *testing.M) { testsvc.Main(m) }` in the package, so that its cluster stops after the tests")
	}
	c := sharedCluster(t)
	db := "t_" + randHex(6)
	if _, err := c.psql("postgres", "CREATE DATABASE "+db); err != nil {
		t.Fatalf("testsvc: create database: %v", err)
	}
	t.Cleanup(func() {
		if err := c.dropDatabase(db); err != nil && c.running() {
			t.Logf("testsvc: drop database %s: %v", db, err)
		}
	})
	return c.pg(db)
}

// NewPostgres starts a private cluster owned by this test, with
// wal_level=logical and the options' settings, stopped and deleted when the
// test ends. The test may Stop, Start, Restart or Kill it; the port stays
// the same. DSN names the postgres database. Without the PostgreSQL server
// binaries the test skips or fails by the policy of Unavailable.
func NewPostgres(t testing.TB, opt PGOptions) *PG {
	t.Helper()
	c, err := newCluster(opt.Settings)
	if errors.Is(err, errNoServer) {
		Unavailable(t, "%v", err)
	}
	if err != nil {
		t.Fatalf("testsvc: private PostgreSQL: %v", err)
	}
	t.Cleanup(c.destroy)
	return c.pg("postgres")
}

// Stop shuts the cluster down cleanly (a fast shutdown: a checkpoint, then
// exit) and waits for it.
func (p *PG) Stop(t testing.TB) {
	t.Helper()
	p.own(t)
	if err := p.c.stop(syscall.SIGINT, 60*time.Second); err != nil {
		t.Fatalf("testsvc: stop PostgreSQL: %v", err)
	}
}

// Start starts a stopped or killed cluster on the same port and waits until
// it accepts connections (crash recovery included).
func (p *PG) Start(t testing.TB) {
	t.Helper()
	p.own(t)
	if err := p.c.start(false); err != nil {
		t.Fatalf("testsvc: start PostgreSQL: %v", err)
	}
}

// Restart is Stop then Start.
func (p *PG) Restart(t testing.TB) {
	t.Helper()
	p.Stop(t)
	p.Start(t)
}

// Kill sends SIGKILL to the postmaster, as a crash would, and waits until
// it and its backends are gone; the next Start runs crash recovery.
func (p *PG) Kill(t testing.TB) {
	t.Helper()
	p.own(t)
	if err := p.c.kill(); err != nil {
		t.Fatalf("testsvc: kill PostgreSQL: %v", err)
	}
}

// SQL runs statements with psql as the superuser on the PG's database and
// returns what they print, unaligned, one row a line. Each statement runs
// in its own transaction, so CREATE DATABASE and the like work.
func (p *PG) SQL(t testing.TB, statements ...string) string {
	t.Helper()
	out, err := p.c.psql(p.Database, statements...)
	if err != nil {
		t.Fatalf("testsvc: %v", err)
	}
	return out
}

func (p *PG) own(t testing.TB) {
	t.Helper()
	if p.c.shared {
		t.Fatal("testsvc: the LogicalPostgres cluster is shared by the test binary; use NewPostgres for a cluster to stop, kill or restart")
	}
}

// A cluster is one data directory and the postmaster running on it.
type cluster struct {
	bin      string // directory of initdb, postgres, psql, pg_isready
	root     string // the directory holding data/ and postgres.log
	data     string
	port     int
	settings []string // -c arguments
	cred     *syscall.Credential
	shared   bool

	mu   sync.Mutex
	proc *os.Process
	done chan struct{} // closed when proc has exited
}

var errNoServer = errors.New("PostgreSQL server binaries not found")

var (
	mainActive atomic.Bool

	sharedMu  sync.Mutex
	shared    *cluster
	sharedErr error

	liveMu sync.Mutex
	live   = map[*cluster]bool{}
)

func sharedCluster(t testing.TB) *cluster {
	t.Helper()
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if shared == nil && sharedErr == nil {
		shared, sharedErr = newCluster(nil)
		if shared != nil {
			shared.shared = true
		}
	}
	if errors.Is(sharedErr, errNoServer) {
		Unavailable(t, "%v", sharedErr)
	}
	if sharedErr != nil {
		t.Fatalf("testsvc: private PostgreSQL: %v", sharedErr)
	}
	return shared
}

// stopShared stops every cluster still running: the shared one, and any a
// test left behind.
func stopShared() {
	liveMu.Lock()
	cs := make([]*cluster, 0, len(live))
	for c := range live {
		cs = append(cs, c)
	}
	liveMu.Unlock()
	for _, c := range cs {
		c.destroy()
	}
}

// baseDir holds every private cluster of every test binary on the machine,
// one directory each, named <pid>-<start time>-<random> after the test
// binary that owns it, so a later binary can tell which owners are gone.
func baseDir() string { return filepath.Join(os.TempDir(), "bloomgate-testpg") }

func newCluster(extra map[string]string) (*cluster, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	c := &cluster{bin: bin}
	if os.Geteuid() == 0 {
		// initdb and postgres refuse to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			return nil, fmt.Errorf("%w: running as root needs the postgres OS user to run them: %v", errNoServer, err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		c.cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	}
	base := baseDir()
	if err := os.MkdirAll(base, 0o755); err != nil {
		return nil, err
	}
	os.Chmod(base, 0o1777) // binaries of other users share it
	reapStale(base)
	me, err := procStart(os.Getpid())
	if err != nil {
		return nil, err
	}
	c.root = filepath.Join(base, fmt.Sprintf("%d-%s-%s", os.Getpid(), me, randHex(4)))
	if err := os.Mkdir(c.root, 0o755); err != nil {
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(c.root)
		}
	}()
	if c.cred != nil {
		if err := os.Chown(c.root, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, err
		}
	}
	c.data = filepath.Join(c.root, "data")
	tmpl, err := template(base, c)
	if err != nil {
		return nil, err
	}
	if out, err := exec.Command("cp", "-a", tmpl, c.data).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("copy the initdb template %s: %v\n%s", tmpl, err, out)
	}
	set := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"unix_socket_directories": c.data,
		"wal_level":               "logical",
		"max_replication_slots":   "64",
		"max_wal_senders":         "64",
		"max_connections":         "200",
		"fsync":                   "off",
		"full_page_writes":        "off",
		"shared_buffers":          "32MB",
		"huge_pages":              "off",
	}
	for k, v := range extra {
		set[k] = v
	}
	keys := make([]string, 0, len(set))
	for k := range set {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		c.settings = append(c.settings, "-c", k+"="+set[k])
	}
	liveMu.Lock()
	live[c] = true
	liveMu.Unlock()
	if err := c.start(true); err != nil {
		c.destroy()
		return nil, err
	}
	ok = true
	return c, nil
}

// template returns a data directory fresh from initdb, made once per
// machine (for each initdb binary and user) under base and copied for every
// cluster: initdb costs about 2 s of CPU, a copy a tenth of that. The
// template is never started; c's directory holds it while it is made, so a
// binary that dies meanwhile leaves nothing reapStale misses. Clusters
// copied from one template share its system identifier, which nothing of
// bloomgate reads.
func template(base string, c *cluster) (string, error) {
	initdb := filepath.Join(c.bin, "initdb")
	st, err := os.Stat(initdb)
	if err != nil {
		return "", err
	}
	args := []string{"-U", "postgres", "--auth=trust", "--no-sync", "--encoding=UTF8", "--locale=C"}
	h := fnv.New64a()
	fmt.Fprintln(h, initdb, st.Size(), st.ModTime().UnixNano(), os.Geteuid(), args)
	dir := filepath.Join(base, fmt.Sprintf("template-%016x", h.Sum64())) // not <pid>-<start>-<rand>: reapStale leaves it
	if _, err := os.Stat(filepath.Join(dir, "PG_VERSION")); err == nil {
		return dir, nil
	}
	tmp := filepath.Join(c.root, "template")
	cmd := exec.Command(initdb, append([]string{"-D", tmp}, args...)...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred}
	cmd.Env = cleanEnv()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("initdb: %v\n%s", err, out)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another binary made it first (a directory is not renamed over
		// a non-empty one).
		os.RemoveAll(tmp)
		if _, serr := os.Stat(filepath.Join(dir, "PG_VERSION")); serr != nil {
			return "", fmt.Errorf("initdb template: %v", err)
		}
	}
	return dir, nil
}

func (c *cluster) pg(db string) *PG {
	return &PG{
		DSN:       fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", c.port, db),
		Host:      "127.0.0.1",
		Port:      c.port,
		Database:  db,
		User:      "postgres",
		DataDir:   c.data,
		SocketDir: c.data,
		c:         c,
	}
}

// start runs the postmaster and waits until it accepts connections. With
// newPort it picks a free port first (and another if that one is taken by
// the time postgres binds it).
func (c *cluster) start(newPort bool) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc != nil {
		return errors.New("already running")
	}
	for attempt := 0; ; attempt++ {
		if newPort {
			p, err := freePort()
			if err != nil {
				return err
			}
			c.port = p
		}
		err := c.launch()
		if err == nil {
			return nil
		}
		if !newPort || attempt == 4 || !strings.Contains(err.Error(), "could not bind") &&
			!strings.Contains(err.Error(), "could not create any TCP/IP sockets") {
			return err
		}
	}
}

// launch starts the postmaster and waits for it; c.mu is held.
func (c *cluster) launch() error {
	logPath := filepath.Join(c.root, "postgres.log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	args := append([]string{"-D", c.data, "-p", strconv.Itoa(c.port)}, c.settings...)
	cmd := exec.Command(filepath.Join(c.bin, "postgres"), args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = cleanEnv()
	// SIGQUIT (an immediate shutdown) reaches the postmaster when the test
	// binary dies without stopping it; the parent-death signal is tied to
	// the thread that started the process, so that thread stays locked to
	// the goroutine that waits for the process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: c.cred, Pdeathsig: syscall.SIGQUIT}
	started := make(chan error, 1)
	done := make(chan struct{})
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			logf.Close()
			return
		}
		started <- nil
		cmd.Wait()
		logf.Close()
		close(done)
	}()
	if err := <-started; err != nil {
		return err
	}
	c.proc, c.done = cmd.Process, done
	deadline := time.Now().Add(90 * time.Second)
	for {
		select {
		case <-done:
			c.proc = nil
			return fmt.Errorf("postgres exited at start:\n%s", tail(logPath))
		default:
		}
		if c.ready() {
			return nil
		}
		if time.Now().After(deadline) {
			c.proc.Signal(syscall.SIGQUIT)
			<-done
			c.proc = nil
			return fmt.Errorf("postgres not ready after 90s:\n%s", tail(logPath))
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *cluster) ready() bool {
	conn, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(c.port)), time.Second)
	if err != nil {
		return false
	}
	conn.Close()
	cmd := exec.Command(filepath.Join(c.bin, "pg_isready"), "-q", "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres", "-d", "postgres", "-t", "2")
	cmd.Env = cleanEnv()
	return cmd.Run() == nil
}

func (c *cluster) running() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.proc != nil
}

// stop signals the postmaster (SIGINT: fast shutdown; SIGQUIT: immediate)
// and waits, killing it after timeout.
func (c *cluster) stop(sig syscall.Signal, timeout time.Duration) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return nil
	}
	c.proc.Signal(sig)
	select {
	case <-c.done:
	case <-time.After(timeout):
		c.proc.Kill()
		<-c.done
		c.proc = nil
		return fmt.Errorf("postgres did not stop within %v; killed it", timeout)
	}
	c.proc = nil
	return nil
}

func (c *cluster) kill() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.proc == nil {
		return errors.New("not running")
	}
	children := childPIDs(c.proc.Pid)
	c.proc.Kill()
	<-c.done
	c.proc = nil
	// Backends exit on noticing the postmaster's death; until they have, the
	// old shared memory is in use and a new postmaster refuses to start.
	deadline := time.Now().Add(30 * time.Second)
	for _, pid := range children {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("backend %d still running 30s after the postmaster was killed", pid)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return nil
}

// destroy stops the cluster at once and deletes its directory.
func (c *cluster) destroy() {
	c.stop(syscall.SIGQUIT, 30*time.Second)
	os.RemoveAll(c.root)
	liveMu.Lock()
	delete(live, c)
	liveMu.Unlock()
}

func (c *cluster) dropDatabase(db string) error {
	lit := "'" + db + "'"
	_, err := c.psql("postgres",
		"SELECT pg_terminate_backend(active_pid, 5000) FROM pg_replication_slots WHERE database = "+lit+" AND active_pid IS NOT NULL",
		"SELECT pg_drop_replication_slot(slot_name) FROM pg_replication_slots WHERE database = "+lit,
		"DROP DATABASE IF EXISTS "+db+" WITH (FORCE)")
	return err
}

// psql runs each statement in its own transaction and returns the output.
func (c *cluster) psql(db string, statements ...string) (string, error) {
	args := []string{"-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres", "-d", db}
	for _, s := range statements {
		args = append(args, "-c", s)
	}
	cmd := exec.Command(filepath.Join(c.bin, "psql"), args...)
	cmd.Env = append(cleanEnv(), "PGCONNECT_TIMEOUT=10")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("psql %q: %v: %s", statements, err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// binDir finds initdb and postgres: BLOOMGATE_PG_BINDIR, else the newest
// /usr/lib/postgresql/*/bin, else the directory of initdb on PATH.
func binDir() (string, error) {
	has := func(dir string) bool {
		for _, b := range []string{"initdb", "postgres", "psql", "pg_isready"} {
			if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
				return false
			}
		}
		return true
	}
	if d := os.Getenv(EnvPGBinDir); d != "" {
		if has(d) {
			return d, nil
		}
		return "", fmt.Errorf("%w in %s=%s", errNoServer, EnvPGBinDir, d)
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		va, _ := strconv.Atoi(filepath.Base(filepath.Dir(a)))
		vb, _ := strconv.Atoi(filepath.Base(filepath.Dir(b)))
		return vb - va
	})
	for _, d := range dirs {
		if has(d) {
			return d, nil
		}
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && has(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
		if has(filepath.Dir(p)) {
			return filepath.Dir(p), nil
		}
	}
	return "", fmt.Errorf("%w (initdb, postgres, psql, pg_isready: not in /usr/lib/postgresql/*/bin nor on PATH; set %s)", errNoServer, EnvPGBinDir)
}

// reapStale stops and deletes the clusters of test binaries that are gone
// (a binary that panicked or was killed leaves its cluster's directory; its
// postmaster got SIGQUIT when the binary died).
func reapStale(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) != 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[0])
		if err != nil {
			continue
		}
		if st, err := procStart(pid); err == nil && st == parts[1] {
			continue // its owner is running
		}
		dir := filepath.Join(base, e.Name())
		data := filepath.Join(dir, "data")
		if b, err := os.ReadFile(filepath.Join(data, "postmaster.pid")); err == nil {
			line, _, _ := strings.Cut(string(b), "\n")
			if pm, err := strconv.Atoi(strings.TrimSpace(line)); err == nil && pm > 0 {
				if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pm)); err == nil && bytes.Contains(cmdline, []byte(data)) {
					syscall.Kill(pm, syscall.SIGKILL)
				}
			}
		}
		os.RemoveAll(dir)
	}
}

// procStart is the start time of process pid (field 22 of /proc/pid/stat),
// which tells a process from a later one with the same pid.
func procStart(pid int) (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return "", err
	}
	// The command name (field 2) is in parentheses and may hold spaces.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return "", errors.New("bad /proc stat")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 20 {
		return "", errors.New("bad /proc stat")
	}
	return f[19], nil
}

func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(b, ')')
	return i >= 0 && !bytes.HasPrefix(bytes.TrimSpace(b[i+1:]), []byte("Z"))
}

// childPIDs lists the processes whose parent is pid.
func childPIDs(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) > 1 && f[1] == strconv.Itoa(pid) {
			out = append(out, p)
		}
	}
	return out
}

func freePort() (int, error) { return FreePort() }

// cleanEnv is the environment without the libpq variables that would
// point psql or the server elsewhere.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "PG") {
			out = append(out, kv)
		}
	}
	return out
}

func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

func randHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

func lookPath(name string) (string, error) { return exec.LookPath(name) }
