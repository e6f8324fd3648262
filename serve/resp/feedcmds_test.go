package resp

import (
	"net"
	"strings"
	"testing"
)

// TestFeedCommandsRebuildOnly: on a rebuild-only set BF.EXISTSAT refuses a
// position, BG.EXISTSAT confirms as BG.EXISTS does, a bad position is an
// error, and INFO names the build and the set's mode and role.
func TestFeedCommandsRebuildOnly(t *testing.T) {
	host, port, _ := usersServer(t)
	out := rawExchange(t, net.JoinHostPort(host, port), "AUTH "+testPassword+"\r\n"+
		"BF.EXISTSAT users user1@example.com 0/16B3\r\n"+
		"BG.EXISTSAT users user1@example.com 0/16B3\r\n"+
		"BG.EXISTSAT users nobody@example.com 12\r\n"+
		"BF.EXISTSAT users user1@example.com not-a-position\r\n"+
		"BF.EXISTSAT nosuchset k 1\r\n"+
		"BF.EXISTSAT users k\r\n"+
		"INFO\r\n")
	for _, want := range []string{
		"+OK\r\n",
		"-ERR set does not follow a change feed (follow no): it has no position; use BG.EXISTS\r\n",
		":1\r\n:0\r\n",
		"-ERR position is not an LSN such as 16/B374D848 or a decimal integer\r\n",
		"-ERR no such table-backed set\r\n",
		"-ERR wrong number of arguments for 'bf.existsat' command\r\n",
		"redis_version:7.4.0\r\n", "bloomgate_version:", "# Bloomgate\r\n",
		"set_users:mode=rebuild,role=none,state=ready,ready=1,position=0/0,lag_ms=0,generation=1,reason=\r\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("reply lacks %q:\n%s", want, out)
		}
	}
}
