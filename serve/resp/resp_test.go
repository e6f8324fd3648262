package resp

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
)

// startServer serves a fresh in-memory store (or cfg.Store) on a free
// loopback port and returns its address.
func startServer(t testing.TB, cfg Config, scfg serve.Config) (string, *serve.Store) {
	t.Helper()
	if cfg.Store == nil {
		st, err := serve.Open(scfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		cfg.Store = st
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return ln.Addr().String(), cfg.Store
}

// needBinary returns the path of a client program (testsvc.Binary: skip
// when missing, fail in CI).
func needBinary(t *testing.T, path string) string {
	t.Helper()
	return testsvc.Binary(t, path)
}

// rawExchange sends raw bytes and returns everything the server sent until
// it closed the connection or stopped answering.
func rawExchange(t *testing.T, addr, send string) string {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, send); err != nil {
		t.Fatal(err)
	}
	c.(*net.TCPConn).CloseWrite()
	out, _ := io.ReadAll(c)
	return string(out)
}

func TestRawProtocol(t *testing.T) {
	addr, _ := startServer(t, Config{}, serve.Config{})
	tests := []struct {
		name, send, want string
	}{
		{"ping", "*1\r\n$4\r\nPING\r\n", "+PONG\r\n"},
		{"inline", "PING\r\nbf.add k \"a b\"\r\nBF.EXISTS k 'a b'\r\n", "+PONG\r\n:1\r\n:1\r\n"},
		{"pipelined", "*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$1\r\nx\r\n*3\r\n$6\r\nBF.ADD\r\n$1\r\nk\r\n$1\r\nx\r\n", ":1\r\n:0\r\n"},
		{"unknown", "FOO a b\r\n", "-ERR unknown command 'FOO', with args beginning with: 'a' 'b' \r\n"},
		{"arity", "BF.ADD k\r\n", "-ERR wrong number of arguments for 'bf.add' command\r\n"},
		{"bad bulk length", "*1\r\n$-5\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bad multibulk", "*x\r\n", "-ERR Protocol error: invalid multibulk length\r\n"},
		{"missing dollar", "*1\r\n:4\r\n", "-ERR Protocol error: expected '$', got ':'\r\n"},
		{"unbalanced", "ECHO \"abc\r\n", "-ERR Protocol error: unbalanced quotes in request\r\n"},
		{"hello3 bool", "HELLO 3\r\nBF.EXISTS nokey a\r\n", ""},
		{"wrongtype", "CF.ADD c a\r\nBF.ADD c a\r\nBF.EXISTS c a\r\n", ":1\r\n-WRONGTYPE Operation against a key holding the wrong kind of value\r\n:0\r\n"},
		{"cf del missing", "CF.DEL nokey a\r\n", "-Not found\r\n"},
		{"bf info missing", "BF.INFO nokey\r\n", "-ERR not found\r\n"},
		{"select", "SELECT 0\r\nSELECT 1\r\n", "+OK\r\n-ERR DB index is out of range\r\n"},
		{"quit", "QUIT\r\nPING\r\n", "+OK\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := rawExchange(t, addr, tt.send)
			if tt.name == "hello3 bool" {
				if !strings.HasSuffix(got, "#f\r\n") || !strings.HasPrefix(got, "%7\r\n") {
					t.Errorf("got %q", got)
				}
				return
			}
			if got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

// TestMalformedCostsOneConnection: a protocol error closes that connection
// only.
func TestMalformedCostsOneConnection(t *testing.T) {
	addr, _ := startServer(t, Config{}, serve.Config{})
	good, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	br := bufio.NewReader(good)
	rawExchange(t, addr, "*2\r\n$3\r\nGET\r\n$9999999999999\r\n")
	io.WriteString(good, "PING\r\n")
	if line, _ := br.ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("other connection got %q", line)
	}
}

func TestLimits(t *testing.T) {
	addr, _ := startServer(t, Config{MaxBulkLen: 10, MaxArgs: 3, Password: "pw"}, serve.Config{})
	tests := []struct{ name, send, want string }{
		{"noauth", "PING\r\n", "-NOAUTH Authentication required.\r\n"},
		{"wrongpass", "AUTH nope\r\n", "-WRONGPASS invalid username-password pair or user is disabled.\r\n"},
		{"auth user pass", "AUTH default pw\r\nPING\r\n", "+OK\r\n+PONG\r\n"},
		{"preauth bulk bound", "*2\r\n$4\r\nAUTH\r\n$20000\r\n", "-ERR Protocol error: invalid bulk length\r\n"},
		{"bulk bound", "AUTH pw\r\n*2\r\n$4\r\nECHO\r\n$11\r\n", "+OK\r\n-ERR Protocol error: invalid bulk length\r\n"},
		{"args bound", "AUTH pw\r\n*4\r\n", "+OK\r\n-ERR Protocol error: invalid multibulk length\r\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := rawExchange(t, addr, tt.send); got != tt.want {
				t.Errorf("got  %q\nwant %q", got, tt.want)
			}
		})
	}
}

func TestMaxConns(t *testing.T) {
	addr, _ := startServer(t, Config{MaxConns: 1}, serve.Config{})
	first, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	io.WriteString(first, "PING\r\n")
	if line, _ := bufio.NewReader(first).ReadString('\n'); line != "+PONG\r\n" {
		t.Fatalf("first connection: %q", line)
	}
	if got := rawExchange(t, addr, "PING\r\n"); got != "-ERR max number of clients reached\r\n" {
		t.Errorf("second connection: %q", got)
	}
}

// FuzzReader feeds arbitrary bytes to the request parser: no panic, and
// every argument within the limits.
func FuzzReader(f *testing.F) {
	for _, s := range []string{
		"*1\r\n$4\r\nPING\r\n", "PING\r\n", "set a \"b\\x41\" 'c'\r\n", "*2\r\n$3\r\nfoo\r\n$-1\r\n",
		"*-1\r\n", "*0\r\n", "\r\n", "*1\r\n$100\r\nab", "\"\\", "*99999999999999999999\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		r := reader{br: bufio.NewReaderSize(bytes.NewReader(data), 64), maxBulk: 1 << 10, maxArgs: 16, maxInline: 64}
		for range 100 {
			args, err := r.next()
			if err != nil {
				return
			}
			if len(args) > 16 {
				t.Fatalf("%d args", len(args))
			}
			for _, a := range args {
				if len(a) > 1<<10 && len(a) > len(data) {
					t.Fatalf("argument of %d bytes", len(a))
				}
			}
		}
	})
}

func TestGlob(t *testing.T) {
	for _, tt := range []struct {
		p, s string
		want bool
	}{
		{"*", "abc", true}, {"a*", "abc", true}, {"a?c", "abc", true}, {"a[bx]c", "abc", true},
		{"a[^b]c", "abc", false}, {"a[a-c]c", "abc", true}, {"a\\*", "a*", true}, {"a\\*", "ab", false},
		{"*a*a*a*a*a*a*a*a*b", strings.Repeat("a", 60), false},
	} {
		if got := globMatch([]byte(tt.p), []byte(tt.s)); got != tt.want {
			t.Errorf("globMatch(%q, %q) = %v", tt.p, tt.s, got)
		}
	}
}
