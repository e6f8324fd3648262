package testsvc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// FreePort returns a TCP port on 127.0.0.1 that nothing listens on now, for
// a server another process is about to start. It picks below the kernel's
// ephemeral range (net.ipv4.ip_local_port_range), where the port :0 would
// give lies: any outgoing connection of any test running meanwhile can take
// a port from that range as its source port between the pick and the
// server's bind ("address already in use"). Below it only another test's
// pick can collide, and a port is never handed out twice by one process.
// Where the range starts too low to leave room, it falls back to :0.
func FreePort() (int, error) {
	lo, hi := pickRange()
	for range 100 {
		if hi-lo < 1000 {
			break
		}
		p := lo + rand.IntN(hi-lo)
		if !takePort(p) {
			continue
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
		if err != nil {
			continue // in use now
		}
		l.Close()
		return p, nil
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// FreeAddr is FreePort as "127.0.0.1:port"; it fails the test if no port
// can be had.
func FreeAddr(t testing.TB) string {
	t.Helper()
	p, err := FreePort()
	if err != nil {
		t.Fatalf("testsvc: free port: %v", err)
	}
	return fmt.Sprintf("127.0.0.1:%d", p)
}

var handedOut struct {
	sync.Mutex
	ports map[int]bool
}

// takePort records p as handed out and reports whether it was not before.
func takePort(p int) bool {
	handedOut.Lock()
	defer handedOut.Unlock()
	if handedOut.ports == nil {
		handedOut.ports = map[int]bool{}
	}
	if handedOut.ports[p] {
		return false
	}
	handedOut.ports[p] = true
	return true
}

// pickRange is where FreePort picks: from 10000 up to the start of the
// ephemeral range (32768 on Linux by default).
func pickRange() (lo, hi int) {
	lo, hi = 10000, 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				hi = n
			}
		}
	}
	return lo, hi
}
