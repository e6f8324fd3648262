package cli

import (
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/server"
)

// TestMergeServeFlagsKeepsEmpty: a key the file gives as "" keeps it (http
// "" disables HTTP, data "" is memory only); a key the file leaves out
// takes the flag's default; a flag given on the command line wins.
func TestMergeServeFlagsKeepsEmpty(t *testing.T) {
	parse := func(conf string) *server.ConfigFile {
		f, err := server.ParseConfig(strings.NewReader(conf))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f := mergeServeFlags(parse("http \"\"\ndata \"\"\n"), map[string]bool{}, "127.0.0.1:6380", "127.0.0.1:8080", "./bloomgate-data", "everysec")
	if f.HTTP != "" || f.DataDir != "" || f.RESP != "127.0.0.1:6380" || f.Fsync != "everysec" {
		t.Errorf("http \"\", data \"\" in the file: got http %q, data %q, resp %q, appendfsync %q", f.HTTP, f.DataDir, f.RESP, f.Fsync)
	}
	f = mergeServeFlags(parse("resp 127.0.0.1:7000\n"), map[string]bool{"data": true}, "127.0.0.1:6380", "127.0.0.1:8080", "", "everysec")
	if f.HTTP != "127.0.0.1:8080" || f.DataDir != "" || f.RESP != "127.0.0.1:7000" {
		t.Errorf("resp in the file, -data \"\": got http %q, data %q, resp %q", f.HTTP, f.DataDir, f.RESP)
	}
}
