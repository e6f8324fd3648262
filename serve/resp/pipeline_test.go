package resp

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"
)

// TestPipelineWrittenBeforeRead: a client that writes a whole pipeline
// whose replies are larger than both sockets' buffers before it reads any
// of them (as redis-py's pipelines do) gets every reply: the server goes
// on reading while its replies wait for the client, as redis-server does,
// instead of both waiting for each other.
func TestPipelineWrittenBeforeRead(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("replies are queued on Linux's raw I/O only")
	}
	addr := startServerIO(t, Config{}, false)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const cmds, items = 16, 100_000 // replies of ~400 KB each
	var req strings.Builder
	fmt.Fprintf(&req, "*4\r\n$10\r\nBF.RESERVE\r\n$1\r\nf\r\n$4\r\n0.01\r\n$4\r\n1000\r\n")
	var cmd strings.Builder
	fmt.Fprintf(&cmd, "*%d\r\n$10\r\nBF.MEXISTS\r\n$1\r\nf\r\n", items+2)
	for i := range items {
		fmt.Fprintf(&cmd, "$8\r\ni%07d\r\n", i)
	}
	for range cmds {
		req.WriteString(cmd.String())
	}
	c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.WriteString(c, req.String()); err != nil {
		t.Fatalf("writing a %d-byte pipeline before reading: %v", req.Len(), err)
	}
	br := bufio.NewReaderSize(c, 1<<16)
	if line, err := br.ReadString('\n'); err != nil || line != "+OK\r\n" {
		t.Fatalf("BF.RESERVE: %q %v", line, err)
	}
	for i := range cmds {
		line, err := br.ReadString('\n')
		if err != nil || line != fmt.Sprintf("*%d\r\n", items) {
			t.Fatalf("reply %d: %q %v", i+1, line, err)
		}
		for range items {
			if line, err := br.ReadString('\n'); err != nil || line != ":0\r\n" {
				t.Fatalf("reply %d: %q %v", i+1, line, err)
			}
		}
	}
}
