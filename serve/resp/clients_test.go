package resp

import (
	"context"
	"fmt"
	"github.com/bloomgate/bloomgate/internal/demo"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

const testPassword = "s3cret"

// usersServer serves a store with a table-backed set "users" over an SQLite
// users table holding user0..user999@example.com, and returns the address
// and the database file.
func usersServer(t *testing.T) (host, port, dbPath string) {
	t.Helper()
	dbPath = filepath.Join(t.TempDir(), "app.db")
	db, err := sqlite.Open(dbPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	users := demo.SQLiteUsers{DB: db, Table: "users"}
	ctx := context.Background()
	if err := users.Create(ctx); err != nil {
		t.Fatal(err)
	}
	if err := users.Load(ctx, 1000, func(i int) string { return fmt.Sprintf("user%d@example.com", i) }); err != nil {
		t.Fatal(err)
	}
	// Positions as bloomgate serve configures them (PostgreSQL's LSNs).
	st, err := serve.Open(serve.Config{Positions: postgres.LSN, Sets: []serve.SetConfig{{
		Name: "users", Source: users.Source(), Normalizer: bloomgate.LowerTrim,
		Confirm: sqlite.Confirm{DB: db, Query: "SELECT 1 FROM users WHERE email = lower(trim(?))"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testsvc.Eventually(t, time.Minute, st.Ready, "store not ready")
	addr, _ := startServer(t, Config{Store: st, Password: testPassword}, serve.Config{})
	host, port, _ = net.SplitHostPort(addr)
	return host, port, dbPath
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func TestPHPClient(t *testing.T) {
	php := testsvc.PHPExtension(t, "redis", "php-redis")
	host, port, _ := usersServer(t)
	t.Run("email uniqueness", func(t *testing.T) {
		out := run(t, php, "testdata/clients/email_uniqueness.php", host, port, testPassword, "user42@example.com", "new-user@example.com")
		t.Log(out)
	})
	t.Run("revocation", func(t *testing.T) {
		run(t, php, "testdata/clients/revocation.php", host, port, testPassword)
	})
}

func TestPythonClient(t *testing.T) {
	py := testsvc.PythonModule(t, "python3-redis", "redis")
	host, port, dbPath := usersServer(t)
	t.Log(run(t, py, "testdata/clients/readthrough.py", host, port, testPassword, dbPath, "user42@example.com"))
}

func TestRedisCLI(t *testing.T) {
	cli := needBinary(t, "redis-cli")
	host, port, _ := usersServer(t)
	rc := func(args ...string) string {
		return strings.TrimSpace(run(t, cli, append([]string{"-h", host, "-p", port, "-a", testPassword, "--no-auth-warning"}, args...)...))
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"PING"}, "PONG"},
		{[]string{"BF.ADD", "k", "a"}, "1"},
		{[]string{"BF.MADD", "k", "a", "b"}, "0\n1"},
		{[]string{"BF.EXISTS", "users", "user1@example.com"}, "1"},
		{[]string{"BG.EXISTS", "users", "nobody@example.com"}, "0"},
		{[]string{"TYPE", "users"}, "MBbloom--"},
		{[]string{"BF.INFO", "k", "CAPACITY"}, "100"},
		{[]string{"CF.DEL", "nokey", "x"}, "Not found"},
		{[]string{"--scan"}, "k\nusers"},
		{[]string{"DBSIZE"}, "2"},
	} {
		if got := rc(tt.args...); got != tt.want {
			t.Errorf("redis-cli %v = %q, want %q", tt.args, got, tt.want)
		}
	}
	// redis-cli in RESP3.
	if got := rc("-3", "BF.EXISTS", "k", "a"); got != "(true)" && got != "1" {
		t.Errorf("redis-cli -3 BF.EXISTS = %q", got)
	}
}

func TestRedisBenchmark(t *testing.T) {
	bench := needBinary(t, "redis-benchmark")
	host, port, _ := usersServer(t)
	out := run(t, bench, "-h", host, "-p", port, "-a", testPassword, "-n", "2000", "-c", "4", "-P", "4", "-q",
		"BF.EXISTS", "users", "user1@example.com")
	if !strings.Contains(out, "requests per second") {
		t.Errorf("redis-benchmark output: %s", out)
	}
}
