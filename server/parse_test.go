package server

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/filter"
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
  follow no
  query SELECT email FROM users
  confirm SELECT 1 FROM users WHERE email = $1
  normalize lowertrim
  kind cuckoo
  fp-rate 0.001
}
set orders {
  sqlite ./app.db
  follow no
  table orders
  column code
}
`

func TestParseServeFile(t *testing.T) {
	f, err := ParseConfig(strings.NewReader(exampleConfig))
	if err != nil {
		t.Fatal(err)
	}
	if f.Password != "s3cret # not a comment" || f.Fsync != "always" || f.MaxMemory != 2<<30 || f.RESPLimits.Timeout != 5*time.Minute {
		t.Errorf("globals: %+v", f)
	}
	if len(f.Sets) != 2 || f.Sets[0].Name != "users" || f.Sets[0].Source.Confirm != "SELECT 1 FROM users WHERE email = $1" ||
		f.Sets[0].Family != filter.FamilyCuckoo || f.Sets[1].Source.Driver != SourceSQLite || f.Sets[1].Source.DSN != "./app.db" || f.Sets[1].Source.Column != "code" {
		t.Errorf("sets: %+v", f.Sets)
	}
}

// TestDocsConfig parses every config example in docs/serve.md (the
// fenced blocks marked conf): each must be a valid config file.
func TestDocsConfig(t *testing.T) {
	doc, err := os.ReadFile("../docs/serve.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := 0
	rest := string(doc)
	for {
		var ok bool
		_, rest, ok = strings.Cut(rest, "```conf\n")
		if !ok {
			break
		}
		var block string
		block, rest, _ = strings.Cut(rest, "```")
		blocks++
		if _, err := ParseConfig(strings.NewReader(block)); err != nil {
			t.Errorf("docs/serve.md config example %d: %v\n%s", blocks, err, block)
		}
	}
	if blocks < 3 {
		t.Errorf("docs/serve.md has %d config examples (```conf blocks), want at least 3", blocks)
	}
	// The first, in the config file section, is the one users copy.
	_, rest, ok := strings.Cut(string(doc), "## Config file")
	if !ok {
		t.Fatal("docs/serve.md has no config file section")
	}
	_, rest, _ = strings.Cut(rest, "```conf\n")
	block, _, _ := strings.Cut(rest, "```")
	f, err := ParseConfig(strings.NewReader(block))
	if err != nil {
		t.Fatalf("docs/serve.md config: %v", err)
	}
	if f.Password != "s3cret" || f.Fsync != "everysec" || len(f.Sets) != 1 || f.Sets[0].Source.Driver != SourcePostgres || f.Sets[0].RebuildOnly ||
		f.Sets[0].Source.Confirm != "SELECT 1 FROM users WHERE email = lower(trim($1))" || f.Sets[0].Source.Table != "users" || f.Sets[0].Source.Column != "email" {
		t.Errorf("docs/serve.md config parsed as %+v", f)
	}
	// The README's serve quick start.
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, _ = strings.Cut(string(readme), "## Quick start: serve")
	_, rest, ok = strings.Cut(rest, "```conf\n")
	block, _, _ = strings.Cut(rest, "```")
	if f, err = ParseConfig(strings.NewReader(block)); !ok || err != nil || len(f.Sets) != 1 || f.Sets[0].RebuildOnly {
		t.Errorf("README serve quick start config (found %v): %v, parsed as %+v", ok, err, f)
	}
}

// TestDeployConfig parses the example config deploy/ ships.
func TestDeployConfig(t *testing.T) {
	fh, err := os.Open("../deploy/bloomgate.conf.example")
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := ParseConfig(fh)
	if err != nil {
		t.Fatalf("deploy/bloomgate.conf.example: %v", err)
	}
	if len(f.Sets) != 1 || f.Sets[0].RebuildOnly {
		t.Errorf("deploy example parsed as %+v", f)
	}
}

func TestParseServeFileErrors(t *testing.T) {
	for _, tt := range []struct{ conf, want string }{
		{"resp :1\nbogus 1\n", `line 2: unknown key "bogus"`},
		{"set s {\n  sqlite x\n  query q\n  colour red\n}\n", `line 4: unknown key "colour" in set "s"`},
		{"set s {\n  sqlite x\n  query q\n}\n", `line 1: set "s": follow: SQLite has no change feed: add "follow no"`},
		{"set s {\n  postgres x\n  query q\n}\n", `line 1: set "s": follow: the change feed follows a column: give table and column`},
		{"set s {\n  postgres x\n  table t\n  column c\n  follow maybe\n}\n", `line 5: follow: want yes or no`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout kafka\n}\n", `line 5: fanout: want jetstream, memory or redis`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout jetstream\n}\n", `set "s": fanout jetstream: give nats`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout redis\n}\n", `set "s": fanout redis: give redis`},
		{"set s {\n  table t\n  column c\n  fanout redis\n  redis redis://x\n  feeder yes\n}\n", `set "s": feeder yes: the feeder follows the database: give postgres`},
		{"set s {\n  table t\n  column c\n  fanout redis\n  redis redis://x\n  confirm q\n}\n", `set "s": confirm: the confirm query needs the database`},
		{"set s.x {\n  postgres x\n  table t\n  column c\n  fanout redis\n  redis redis://x\n}\n", `set "s.x": fanout: the set's name must be`},
		{"set s {\n  postgres x\n  table t\n  column c\n  follow no\n  fanout redis\n  redis redis://x\n}\n", `set "s": fanout: a fanned-out set follows the change feed`},
		{"set s {\n  sqlite x\n  query q\n  follow no\n  max-lag 5s\n}\n", `set "s": slot, publication, max-lag and snapshot-interval need the change feed`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout-key-file /k\n}\n", `set "s": fanout-key-file: the key signs a fan-out's messages: give fanout`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout redis\n  redis redis://x\n}\n", `set "s": fanout: give fanout-key-file`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout redis\n  redis redis://x\n  fanout-key-file k\n  fanout-unsigned yes\n}\n", `contradict each other`},
		{"set s {\n  postgres x\n  table t\n  column c\n  fanout-unsigned yes\n}\n", `set "s": fanout-unsigned: give fanout`},
		{"set s {\n  sqlite x\n  query q\n  follow no\n  kind counting\n}\n", `line 5: kind: want bloom, cuckoo or expiring`},
		{"preauth-timeout 0s\n", "line 1: preauth-timeout: want a duration above zero"},
		{"set s {\n  postgres x\n  table t\n  column c\n  max-lag 0\n}\n", "line 5: max-lag: want a duration above zero"},
		{"set s {\n  postgres x\n  table t\n  column c\n  snapshot-interval 0s\n}\n", "line 5: snapshot-interval: want a duration above zero"},
		{"set s {\n  postgres x\n  table t\n  column c\n  connect-timeout 0\n}\n", "line 5: connect-timeout: want a duration above zero"},
		{"auth-failure-delay -1s\n", "line 1: auth-failure-delay: want a duration above zero"},
		{"preauth-maxclients 0\n", "line 1: preauth-maxclients: want a positive integer"},
		{"appendfsync sometimes\n", "line 1: appendfsync: want always, everysec or no"},
		{"maxmemory lots\n", "line 1: maxmemory: want a size"},
		{"requirepass\n", "line 1: requirepass: want a password"},
		{"requirepass \"\"\n", "line 1: requirepass: want a password"},
		{"resp a\nresp b\n", "line 2: resp given twice (first on line 1)"},
		{"set s {\n  sqlite x\n", `line 1: set "s": missing closing "}"`},
		{"set s {\n  query q\n}\n", `line 1: set "s": give exactly one of postgres or sqlite`},
	} {
		_, err := ParseConfig(strings.NewReader(tt.conf))
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

// TestParseFanoutTransports: every registered transport is a value of
// fanout, and its keys land in its sub-config.
func TestParseFanoutTransports(t *testing.T) {
	set := "set users {\n postgres postgres://a@b/c\n table users\n column email\n fanout-unsigned yes\n"
	for _, tt := range []struct {
		conf string
		want FanoutConfig
	}{
		{" fanout jetstream\n nats nats://a:4222,nats://b:4222\n nats-user u\n", FanoutConfig{Transport: TransportJetStream, Unsigned: true,
			NATS: NATSConfig{URLs: "nats://a:4222,nats://b:4222", User: "u"}}},
		{" fanout redis\n redis redis://127.0.0.1:6379\n feeder no\n", FanoutConfig{Transport: TransportRedis, Unsigned: true,
			Feeder: FeederNo, Redis: RedisConfig{URL: "redis://127.0.0.1:6379"}}},
		{" fanout memory\n lease-ttl 3s\n", FanoutConfig{Transport: TransportMemory, Unsigned: true, LeaseTTL: 3 * time.Second}},
	} {
		f, err := ParseConfig(strings.NewReader(set + tt.conf + "}\n"))
		if err != nil {
			t.Errorf("%q: %v", tt.conf, err)
			continue
		}
		got := f.Sets[0].Fanout
		if got.Transport != tt.want.Transport || got.NATS != tt.want.NATS || got.Redis != tt.want.Redis ||
			got.Feeder != tt.want.Feeder || got.LeaseTTL != tt.want.LeaseTTL || !got.Unsigned {
			t.Errorf("%q: parsed as %+v, want %+v", tt.conf, got, tt.want)
		}
	}
}

// FuzzParseConfig: no input panics the parser, and what it accepts passes
// the check Start makes.
func FuzzParseConfig(f *testing.F) {
	f.Add(exampleConfig)
	f.Add("set s {\n  postgres x\n  table t\n  column c\n  fanout memory\n  fanout-unsigned yes\n  answer \"SELECT 1 FROM public.t WHERE c = $1\"\n}\npostgres-listen 127.0.0.1:6432\npostgres-upstream a:1\n")
	f.Add("set r {\n sqlite ./a.db\n kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n follow no\n}\n")
	f.Fuzz(func(t *testing.T, conf string) {
		c, err := ParseConfig(strings.NewReader(conf))
		if err != nil {
			return
		}
		if err := c.Config.check(); err != nil {
			t.Errorf("parsed, then failed its check: %v", err)
		}
	})
}
