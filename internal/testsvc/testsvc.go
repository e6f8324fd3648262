// Package testsvc gives tests the servers they talk to, and one policy for
// when a server is missing: outside CI the test skips with one line; with
// BLOOMGATE_REQUIRE_SERVICES=1 (as .ci/run sets) it fails instead.
//
// The shared servers (Postgres, Redis, NATS) are the ones already running on
// the machine; tests must give every object they create there a unique
// name. What the shared PostgreSQL lacks (logical decoding, a server to kill
// or restart) comes from a private cluster this package starts from the
// installed PostgreSQL binaries: LogicalPostgres (one per test binary, a fresh
// database per call) and NewPostgres (one per test). A package that calls
// LogicalPostgres runs its tests through Main, which stops the cluster when
// the tests end.
// NewNATSCluster starts a private 3-node JetStream cluster for tests that
// need replication or a node to kill.
//
// The package imports no client library: it finds a server by dialling it,
// and runs SQL on its private clusters with the psql that comes with the
// server binaries.
package testsvc

import (
	"bufio"
	"bytes"
	"flag"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Environment variables that point the tests at other servers.
const (
	EnvRequire  = "BLOOMGATE_REQUIRE_SERVICES" // "1": a missing server fails the test
	EnvPostgres = "BLOOMGATE_POSTGRES_URL"     // the shared PostgreSQL
	EnvRedis    = "BLOOMGATE_REDIS_ADDR"       // the shared Redis
	EnvNATS     = "BLOOMGATE_NATS_URL"         // the shared NATS
	EnvPGBinDir = "BLOOMGATE_PG_BINDIR"        // where initdb and postgres are
)

// Defaults of the shared servers.
const (
	DefaultPostgres = "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
	DefaultRedis    = "127.0.0.1:6379"
	DefaultNATS     = "nats://127.0.0.1:4222"
)

// Required reports whether a missing server fails the test (CI) rather
// than skipping it.
func Required() bool {
	v := os.Getenv(EnvRequire)
	return v != "" && v != "0"
}

// Unavailable ends the test because something it needs is missing: it
// fails under BLOOMGATE_REQUIRE_SERVICES=1 and skips otherwise, with one
// line that says what is missing.
func Unavailable(t testing.TB, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	if Required() {
		t.Fatalf("%s (%s=1: not skipping)", msg, EnvRequire)
	}
	t.Skipf("skipping: %s (set %s=1 to fail instead)", msg, EnvRequire)
}

// Binary returns the path of an installed program the test drives (a
// client such as redis-cli), or ends the test by the policy of Unavailable.
func Binary(t testing.TB, name string) string {
	t.Helper()
	p, err := lookPath(name)
	if err != nil {
		Unavailable(t, "%s not installed: %v", name, err)
	}
	return p
}

const dialTimeout = 2 * time.Second

// Postgres returns the connection URL of the shared PostgreSQL
// (BLOOMGATE_POSTGRES_URL, default DefaultPostgres) after checking that it
// accepts connections. Its wal_level is replica: a test that needs logical
// decoding uses LogicalPostgres.
func Postgres(t testing.TB) string {
	t.Helper()
	dsn := env(EnvPostgres, DefaultPostgres)
	addr := pgAddr(dsn)
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		Unavailable(t, "PostgreSQL at %s unreachable: %v", addr, err)
	}
	c.Close()
	return dsn
}

// Redis returns the address of the shared Redis (BLOOMGATE_REDIS_ADDR,
// default DefaultRedis) after checking that it answers PING.
func Redis(t testing.TB) string {
	t.Helper()
	addr := env(EnvRedis, DefaultRedis)
	if err := ping(addr, "PING\r\n", "+PONG"); err != nil {
		Unavailable(t, "Redis at %s unreachable: %v", addr, err)
	}
	return addr
}

// NATS returns the URL of the shared NATS server (BLOOMGATE_NATS_URL,
// default DefaultNATS) after checking that it greets with INFO.
func NATS(t testing.TB) string {
	t.Helper()
	u := env(EnvNATS, DefaultNATS)
	addr := u
	if p, err := url.Parse(u); err == nil && p.Host != "" {
		addr = p.Host
	}
	if err := ping(addr, "", "INFO "); err != nil {
		Unavailable(t, "NATS at %s unreachable: %v", addr, err)
	}
	return u
}

// Main runs the tests, then the after functions, then stops the private
// servers this test binary started, and exits with the tests' code. Use it
// as
//
//	func TestMain(m *testing.M) { testsvc.Main(m) }
func Main(m *testing.M, after ...func()) {
	mainActive.Store(true)
	code := m.Run()
	for _, f := range after {
		f()
	}
	stopShared()
	stopSharedNATS()
	os.Exit(code)
}

// Eventually polls cond until it returns true, and fails the test with the
// message when timeout passes first. It must be called from the test's
// goroutine.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	wait := time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: "+format, append([]any{timeout}, args...)...)
			return
		}
		time.Sleep(wait)
		wait = min(2*wait, 10*time.Millisecond)
	}
}

// EnvLong names the variable that runs the long stress scenarios: "1"
// runs them (.ci/run sets it); otherwise Long skips them, so that
// go test -race ./... stays a matter of minutes.
const EnvLong = "BLOOMGATE_LONG"

// Long skips a long stress scenario unless BLOOMGATE_LONG=1, and under
// -short always. why says what the run does.
func Long(t testing.TB, why string) {
	t.Helper()
	Short(t, why)
	if os.Getenv(EnvLong) != "1" {
		t.Skipf("long run: %s (%s=1 runs it, as CI does)", why, EnvLong)
	}
}

// IsLong reports whether the long stress scenarios run (BLOOMGATE_LONG=1,
// not -short), for a test that runs a shorter version otherwise.
func IsLong() bool { return !testing.Short() && os.Getenv(EnvLong) == "1" }

// Short skips the test under go test -short, saying why it is long.
func Short(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: %s", why)
	}
}

func env(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// pgAddr is host:port of a PostgreSQL connection string, in URL or
// key=value form.
func pgAddr(dsn string) string {
	host, port := "127.0.0.1", "5432"
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		if h := u.Hostname(); h != "" {
			host = h
		}
		if p := u.Port(); p != "" {
			port = p
		}
		return net.JoinHostPort(host, port)
	}
	for _, f := range strings.Fields(dsn) {
		k, v, _ := strings.Cut(f, "=")
		switch k {
		case "host":
			host = v
		case "port":
			port = v
		}
	}
	if _, err := strconv.Atoi(port); err != nil {
		port = "5432"
	}
	return net.JoinHostPort(host, port)
}

// ping dials addr, sends send and expects a reply line starting with want.
func ping(addr, send, want string) error {
	c, err := net.DialTimeout("tcp", addr, dialTimeout)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(dialTimeout))
	if send != "" {
		if _, err := c.Write([]byte(send)); err != nil {
			return err
		}
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(line, want) {
		return fmt.Errorf("answered %q, want %q", strings.TrimSpace(line), want)
	}
	return nil
}

// PythonModule returns /usr/bin/python3 after checking that it imports each
// of modules, or ends the test by the policy of Unavailable naming the Debian
// package (pkg) that provides them.
func PythonModule(t testing.TB, pkg string, modules ...string) string {
	t.Helper()
	py := Binary(t, "/usr/bin/python3")
	if out, err := exec.Command(py, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput(); err != nil {
		Unavailable(t, "Python module %s missing for %s (Debian %s): %v %s", strings.Join(modules, ", "), py, pkg, err, bytes.TrimSpace(out))
	}
	return py
}

// PHPExtension returns the php binary after checking that it loads the
// extension ext (as `php -m` lists it), or ends the test by the policy of
// Unavailable naming the Debian package (pkg) that provides it.
func PHPExtension(t testing.TB, ext, pkg string) string {
	t.Helper()
	php := Binary(t, "php")
	out, err := exec.Command(php, "-m").Output()
	if err != nil || !slices.Contains(strings.Fields(string(out)), ext) {
		Unavailable(t, "PHP extension %s missing (Debian %s): %v", ext, pkg, err)
	}
	return php
}

// DefaultParallel sets -test.parallel to n unless the command line gives
// it: for a package whose parallel tests mostly wait (on servers, timers,
// other processes), so that more of them overlap than GOMAXPROCS (the
// default, 2 on the project's machine). Call it from TestMain before
// m.Run.
func DefaultParallel(n int) {
	flag.Parse()
	given := false
	flag.Visit(func(f *flag.Flag) { given = given || f.Name == "test.parallel" })
	if !given {
		flag.Set("test.parallel", strconv.Itoa(n))
	}
}
