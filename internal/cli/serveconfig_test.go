package cli

import (
	"os"
	"strings"
	"testing"
	"time"
)

const exampleConfig = `# bloomgate serve
resp 127.0.0.1:6380
http 127.0.0.1:8080
data ./bloomgate-data
requirepass "s3cret # not a comment"
appendfsync always
maxmemory 2gb
timeout 5m

set users {
  postgres postgres://postgres@127.0.0.1:5432/app
  query SELECT email FROM users
  confirm SELECT 1 FROM users WHERE email = $1
  normalize lowertrim
  kind cuckoo
  fp-rate 0.001
}
set orders {
  sqlite ./app.db
  table orders
  column code
}
`

func TestParseServeFile(t *testing.T) {
	f, err := parseServeFile(strings.NewReader(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	if f.Password != "s3cret # not a comment" || f.Fsync != "always" || f.MaxMemory != 2<<30 || f.Timeout != 5*time.Minute {
		t.Errorf("globals: %+v", f)
	}
	if len(f.Sets) != 2 || f.Sets[0].Name != "users" || f.Sets[0].Confirm != "SELECT 1 FROM users WHERE email = $1" ||
		f.Sets[0].Kind != "cuckoo" || f.Sets[1].SQLite != "./app.db" || f.Sets[1].Column != "code" {
		t.Errorf("sets: %+v", f.Sets)
	}
}

// TestDocsConfig parses the config example in docs/serve.md.
func TestDocsConfig(t *testing.T) {
	doc, err := os.ReadFile("../../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "## Config file")
	if !ok {
		t.Fatal("docs/serve.md has no config file section")
	}
	_, rest, _ = strings.Cut(rest, "```\n")
	block, _, _ := strings.Cut(rest, "```")
	f, err := parseServeFile(strings.NewReader(block))
	if err != nil {
		t.Fatalf("docs/serve.md config: %v", err)
	}
	if f.Password != "s3cret" || f.Fsync != "everysec" || len(f.Sets) != 1 || f.Sets[0].Postgres == "" ||
		f.Sets[0].Confirm != "SELECT 1 FROM users WHERE email = lower(trim($1))" || f.Sets[0].Query != "SELECT email FROM users" {
		t.Errorf("docs/serve.md config parsed as %+v", f)
	}
}

func TestParseServeFileErrors(t *testing.T) {
	for _, tt := range []struct{ conf, want string }{
		{"resp :1\nbogus 1\n", `line 2: unknown key "bogus"`},
		{"set s {\n  sqlite x\n  query q\n  colour red\n}\n", `line 4: unknown key "colour" in set "s"`},
		{"appendfsync sometimes\n", "line 1: appendfsync: want always, everysec or no"},
		{"maxmemory lots\n", "line 1: maxmemory: want a size"},
		{"resp a\nresp b\n", "line 2: resp given twice (first on line 1)"},
		{"set s {\n  sqlite x\n", `line 1: set "s": missing closing "}"`},
		{"set s {\n  query q\n}\n", `line 1: set "s": give exactly one of postgres or sqlite`},
	} {
		_, err := parseServeFile(strings.NewReader(tt.conf))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("config %q: error %v, want %q", tt.conf, err, tt.want)
		}
	}
}

func TestProtectedMode(t *testing.T) {
	for _, tt := range []struct {
		addr, pw string
		ok       bool
	}{
		{"127.0.0.1:6380", "", true}, {"localhost:6380", "", true}, {"[::1]:6380", "", true}, {"", "", true},
		{"0.0.0.0:6380", "", false}, {":6380", "", false}, {"10.0.0.1:6380", "", false}, {"0.0.0.0:6380", "pw", true},
	} {
		if err := protectedMode(tt.addr, tt.pw); (err == nil) != tt.ok {
			t.Errorf("protectedMode(%q, %q) = %v", tt.addr, tt.pw, err)
		}
	}
}
