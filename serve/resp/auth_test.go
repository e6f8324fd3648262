package resp

import (
	"bufio"
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/serve"
)

// TestStrangersDoNotLockOut: idle unauthenticated connections, more than
// maxclients of them, never keep a client with the password out.
func TestStrangersDoNotLockOut(t *testing.T) {
	addr, _ := startServer(t, Config{Password: testPassword, MaxConns: 5, MaxPreAuthConns: 5}, serve.Config{})
	for range 50 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
	}
	for i := range 5 {
		rdb := redis.NewClient(&redis.Options{Addr: addr, Password: testPassword, MaxRetries: -1, PoolSize: 1})
		defer rdb.Close()
		if err := rdb.Ping(context.Background()).Err(); err != nil {
			t.Fatalf("client %d with the password, among 50 idle strangers: %v", i, err)
		}
	}
	// Past maxclients authenticated connections, AUTH is refused.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	io.WriteString(c, "AUTH "+testPassword+"\r\n")
	if line, _ := bufio.NewReader(c).ReadString('\n'); line != "-ERR max number of clients reached\r\n" {
		t.Errorf("sixth authenticated connection: %q", line)
	}
}

// TestPreAuthTimeout: a connection that does not authenticate in time is
// closed; one that authenticated is not.
func TestPreAuthTimeout(t *testing.T) {
	addr, _ := startServer(t, Config{Password: testPassword, PreAuthTimeout: 100 * time.Millisecond}, serve.Config{})
	stranger, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer stranger.Close()
	authed, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer authed.Close()
	io.WriteString(authed, "AUTH "+testPassword+"\r\n")
	br := bufio.NewReader(authed)
	if line, _ := br.ReadString('\n'); line != "+OK\r\n" {
		t.Fatalf("AUTH: %q", line)
	}
	stranger.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := stranger.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("idle unauthenticated connection: read %v, want EOF (closed by the server)", err)
	}
	io.WriteString(authed, "PING\r\n")
	if line, _ := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("authenticated connection after the pre-auth timeout: %q", line)
	}
}

// TestFailedAuthSlowed: each wrong password on a connection is answered
// later than the one before.
func TestFailedAuthSlowed(t *testing.T) {
	addr, _ := startServer(t, Config{Password: testPassword, AuthFailureDelay: 20 * time.Millisecond}, serve.Config{})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	br := bufio.NewReader(c)
	start := time.Now()
	for range 4 {
		io.WriteString(c, "AUTH wrong\r\n")
		if line, _ := br.ReadString('\n'); line[0] != '-' {
			t.Fatalf("wrong password: %q", line)
		}
	}
	// 20 + 40 + 80 + 160 ms at least: a lower bound the server enforces.
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("4 wrong passwords answered in %v, want at least 300ms", d)
	}
	io.WriteString(c, "AUTH "+testPassword+"\r\n")
	if line, _ := br.ReadString('\n'); line != "+OK\r\n" {
		t.Fatalf("right password after wrong ones: %q", line)
	}
}
