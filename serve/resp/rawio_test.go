package resp

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve"
)

// startServerIO is startServer with the choice of I/O: raw system calls on
// the socket (plain false, the default on Linux) or net.Conn's.
func startServerIO(t *testing.T, cfg Config, plain bool) string {
	t.Helper()
	st, err := serve.Open(serve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	cfg.Store = st
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv.plainIO = plain
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Shutdown(context.Background()) })
	return ln.Addr().String()
}

// TestRawIOUsed: on Linux a plain TCP connection is served with raw I/O
// (the path every other test of this package then runs).
func TestRawIOUsed(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("raw I/O is Linux-only")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		if c, err := net.Dial("tcp", ln.Addr().String()); err == nil {
			defer c.Close()
			time.Sleep(100 * time.Millisecond)
		}
	}()
	nc, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if newRawIO(nc) == nil {
		t.Fatal("a TCP connection is not served with raw I/O")
	}
}

// TestRawIOLargeExchanges: both I/O paths carry a request larger than the
// read buffer (many reads), replies that fill the socket's buffers while the
// client is still sending (writes that must wait), an idle timeout, and a
// shutdown that interrupts a waiting read.
func TestRawIOLargeExchanges(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			addr := startServerIO(t, Config{}, plain)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			br := bufio.NewReader(nc)
			// A 1 MiB item: many reads of the 64 KiB buffer.
			big := strings.Repeat("x", 1<<20)
			fmt.Fprintf(nc, "*3\r\n$6\r\nBF.ADD\r\n$2\r\nbf\r\n$%d\r\n%s\r\n", len(big), big)
			if line, _ := br.ReadString('\n'); line != ":1\r\n" {
				t.Fatalf("BF.ADD of a 1 MiB item: %q", line)
			}
			// 32 SCANDUMPs of a 1 MiB chunk each, sent before any reply is
			// read: the server's writes wait for room in the socket's
			// buffers.
			fmt.Fprintf(nc, "BF.RESERVE d 0.01 2000000\r\n")
			if line, _ := br.ReadString('\n'); line != "+OK\r\n" {
				t.Fatalf("BF.RESERVE: %q", line)
			}
			const cmds = 32
			if _, err := nc.Write([]byte(strings.Repeat("BF.SCANDUMP d 1\r\n", cmds))); err != nil {
				t.Fatal(err)
			}
			time.Sleep(200 * time.Millisecond)
			for i := range cmds {
				want := fmt.Sprintf("*2\r\n:%d\r\n$%d\r\n", 1+dumpChunk, dumpChunk)
				head := make([]byte, len(want))
				if _, err := io.ReadFull(br, head); err != nil || string(head) != want {
					t.Fatalf("SCANDUMP %d: %q, %v", i, head, err)
				}
				if _, err := br.Discard(dumpChunk + 2); err != nil {
					t.Fatalf("SCANDUMP %d: %v", i, err)
				}
			}
			// The 1 MiB item is there.
			fmt.Fprintf(nc, "*3\r\n$9\r\nBF.EXISTS\r\n$2\r\nbf\r\n$%d\r\n%s\r\n", len(big), big)
			if line, _ := br.ReadString('\n'); line != ":1\r\n" {
				t.Fatalf("BF.EXISTS of the 1 MiB item: %q", line)
			}
		})
	}
}

// TestRawIODeadlines: an idle connection is closed at IdleTimeout, and
// Shutdown ends a connection waiting for its next command, on both paths.
func TestRawIODeadlines(t *testing.T) {
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain=%v", plain), func(t *testing.T) {
			addr := startServerIO(t, Config{IdleTimeout: 50 * time.Millisecond}, plain)
			nc, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write([]byte("PING\r\n"))
			br := bufio.NewReader(nc)
			if line, _ := br.ReadString('\n'); line != "+PONG\r\n" {
				t.Fatalf("PING: %q", line)
			}
			nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			if _, err := br.ReadByte(); err == nil {
				t.Fatal("an idle connection got bytes instead of being closed")
			} else if isTimeout(err) {
				t.Fatal("an idle connection was not closed at IdleTimeout")
			}
		})
		t.Run(fmt.Sprintf("shutdown/plain=%v", plain), func(t *testing.T) {
			st, err := serve.Open(serve.Config{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			srv, err := New(Config{Store: st})
			if err != nil {
				t.Fatal(err)
			}
			srv.plainIO = plain
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			go srv.Serve(ln)
			nc, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer nc.Close()
			nc.Write([]byte("PING\r\n"))
			br := bufio.NewReader(nc)
			if line, _ := br.ReadString('\n'); line != "+PONG\r\n" {
				t.Fatalf("PING: %q", line)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := srv.Shutdown(ctx); err != nil {
				t.Fatalf("Shutdown did not end a waiting connection: %v", err)
			}
		})
	}
}
