package testsvc

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// PgBouncer starts a PgBouncer (Debian pgbouncer) on a free loopback port
// in front of the PostgreSQL at upstream (host:port), pooling with
// poolMode (session, transaction, statement), every database passed
// through and every user trusted (the upstream authenticates nothing more
// than it does for the test's own connections), and returns its address.
// User postgres may use its admin console (database pgbouncer, simple
// protocol: SHOW STATS).
// It is stopped when the test ends. Without pgbouncer installed the test
// ends by the policy of Unavailable.
func PgBouncer(t testing.TB, upstream, poolMode string) string {
	t.Helper()
	bin, err := lookPath("pgbouncer")
	if err != nil {
		if _, serr := os.Stat("/usr/sbin/pgbouncer"); serr != nil {
			Unavailable(t, "pgbouncer not installed (Debian pgbouncer): %v", err)
		}
		bin = "/usr/sbin/pgbouncer"
	}
	host, port, err := net.SplitHostPort(upstream)
	if err != nil {
		t.Fatalf("testsvc: pgbouncer upstream %q: %v", upstream, err)
	}
	dir, err := os.MkdirTemp("", "bloomgate-pgbouncer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	var cred *syscall.Credential
	if os.Geteuid() == 0 {
		// PgBouncer refuses to run as root.
		u, err := user.Lookup("postgres")
		if err != nil {
			Unavailable(t, "pgbouncer refuses root, and there is no postgres OS user to run it: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		cred = &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
		if err := os.Chown(dir, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	addr := FreeAddr(t)
	_, lport, _ := net.SplitHostPort(addr)
	ini := filepath.Join(dir, "pgbouncer.ini")
	conf := fmt.Sprintf(`[databases]
* = host=%s port=%s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %s
unix_socket_dir =
auth_type = trust
admin_users = postgres
auth_file = %s
pool_mode = %s
max_client_conn = 200
default_pool_size = 10
ignore_startup_parameters = extra_float_digits,options
logfile = %s
pidfile = %s
`, host, port, lport, filepath.Join(dir, "users.txt"), poolMode, filepath.Join(dir, "pgbouncer.log"), filepath.Join(dir, "pgbouncer.pid"))
	for name, body := range map[string]string{"pgbouncer.ini": conf, "users.txt": `"postgres" ""` + "\n"} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, ini)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("testsvc: pgbouncer: %v", err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	Eventually(t, 10*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("testsvc: pgbouncer exited: %s", tail(filepath.Join(dir, "pgbouncer.log")))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err == nil {
			c.Close()
		}
		return err == nil
	}, "pgbouncer does not listen on %s", addr)
	return addr
}
