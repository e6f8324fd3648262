package pgwire

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestSilentSocketsDoNotLockOut: connections that never send a startup
// packet do not count against MaxConns, and past MaxStartupConns the
// oldest of them is closed: a peer that only opens sockets cannot keep a
// client out.
func TestSilentSocketsDoNotLockOut(t *testing.T) {
	f := newFrontEnd(t, func(c *Config) { c.MaxConns, c.MaxStartupConns = 3, 4 })
	cfg, err := pgx.ParseConfig(f.front)
	if err != nil {
		t.Fatal(err)
	}
	addr := net.JoinHostPort(cfg.Host, fmt.Sprint(cfg.Port))
	var silent []net.Conn
	for range 8 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		silent = append(silent, c)
	}
	time.Sleep(100 * time.Millisecond) // the server accepts them all
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for i := range 3 {
		c := connectMode(t, f.front, 0)
		if err := c.Ping(ctx); err != nil {
			t.Fatalf("client %d beside %d silent sockets: %v", i+1, len(silent), err)
		}
	}
	// The four oldest silent sockets were closed to make room.
	closed := 0
	for _, c := range silent {
		c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, err := c.Read(make([]byte, 1)); err != nil && !isTimeout(err) {
			closed++
		}
	}
	if closed < 4 {
		t.Errorf("%d silent sockets closed, want at least 4", closed)
	}
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}
