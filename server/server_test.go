package server

import (
	"context"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/fanout/memlog"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
)

func TestMain(m *testing.M) { testsvc.Main(m) }

// TestStartMemoryFanout starts two servers in this process over one
// PostgreSQL table, fanned out over the in-memory transport: the one with
// the source becomes the feeder, the other (FeederNo, no source) an
// instance, and both answer for rows written before and after the start.
func TestStartMemoryFanout(t *testing.T) {
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE users (email text PRIMARY KEY)",
		"CREATE PUBLICATION bg_users FOR TABLE users",
		"INSERT INTO users VALUES ('before@example.com')")
	log := memlog.New(memlog.Config{Set: "users"})
	key := []byte("0123456789abcdef0123456789abcdef")
	set := SetConfig{
		Name:   "users",
		Source: SourceConfig{Driver: SourcePostgres, DSN: pg.DSN, Table: "users", Column: "email"},
		Feed:   FeedConfig{Slot: "bg_users", Publication: "bg_users", MaxLag: 3 * time.Second},
		Fanout: FanoutConfig{Transport: TransportMemory, Key: key, Memory: MemoryConfig{Set: log}},
	}
	instanceSet := set
	instanceSet.Source = SourceConfig{Table: "users", Column: "email"}
	instanceSet.Fanout.Feeder = FeederNo

	ctx := context.Background()
	feeder, err := Start(ctx, Config{RESP: "127.0.0.1:0", Sets: []SetConfig{set}})
	if err != nil {
		t.Fatal(err)
	}
	defer feeder.Close()
	instance, err := Start(ctx, Config{RESP: "127.0.0.1:0", Sets: []SetConfig{instanceSet}})
	if err != nil {
		t.Fatal(err)
	}
	defer instance.Close()

	pg.SQL(t, "INSERT INTO users VALUES ('after@example.com')")
	for _, srv := range []*Server{feeder, instance} {
		rdb := redis.NewClient(&redis.Options{Addr: srv.RESPAddr().String()})
		defer rdb.Close()
		testsvc.Eventually(t, 30*time.Second, func() bool {
			got, err := rdb.BFMExists(ctx, "users", "before@example.com", "after@example.com").Result()
			return srv.Ready() && err == nil && got[0] && got[1]
		}, "server %s: users not ready with both rows", srv.RESPAddr())
		if got, err := rdb.BFExists(ctx, "users", "never@example.com").Result(); err != nil || got {
			t.Errorf("server %s: a key never written: %v, %v (want absent)", srv.RESPAddr(), got, err)
		}
	}
	if r := feeder.Store().Set("users").Status().Role; r != serve.RoleFeeder {
		t.Errorf("the server with the source is %v, want the feeder", r)
	}
	if r := instance.Store().Set("users").Status().Role; r != serve.RoleInstance {
		t.Errorf("the server without it is %v, want an instance", r)
	}
	if err := feeder.Close(); err != nil {
		t.Fatal(err)
	}
	if err := feeder.Close(); err != nil {
		t.Errorf("a second Close: %v", err)
	}
}

// TestStartErrors: a Config built in code is checked as a config file is,
// without line numbers, and a failed Start leaves no listener bound.
func TestStartErrors(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	free := testsvc.FreeAddr(t)
	for _, tt := range []struct {
		name string
		cfg  Config
		want string
	}{
		{"no source", Config{Sets: []SetConfig{{Name: "s"}}}, `set "s": give exactly one of postgres or sqlite`},
		{"sqlite followed", Config{Sets: []SetConfig{{Name: "s", Source: SourceConfig{Driver: SourceSQLite, DSN: "x", Query: "q"}}}},
			`set "s": follow: SQLite has no change feed`},
		{"unsigned", Config{Sets: []SetConfig{{Name: "s", Source: SourceConfig{Driver: SourcePostgres, DSN: "x", Table: "t", Column: "c"},
			Fanout: FanoutConfig{Transport: TransportMemory}}}}, `set "s": fanout: give fanout-key-file`},
		{"unregistered transport", Config{Sets: []SetConfig{{Name: "s", Source: SourceConfig{Driver: SourcePostgres, DSN: "x", Table: "t", Column: "c"},
			Fanout: FanoutConfig{Transport: 99, Unsigned: true}}}}, `set "s": fanout Transport(99): not a registered transport`},
		{"family a set cannot have", Config{Sets: []SetConfig{{Name: "s", Family: filter.FamilyCounting,
			Source: SourceConfig{Driver: SourceSQLite, DSN: "x", Query: "q"}, RebuildOnly: true}}},
			`set "s": kind: a set's filter family is bloom, cuckoo or expiring, not counting`},
		{"protected mode", Config{RESP: "0.0.0.0:0"}, "protected mode"},
		{"port taken", Config{RESP: free, HTTP: taken.Addr().String()}, "address already in use"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			srv, err := Start(context.Background(), tt.cfg)
			if err == nil {
				srv.Close()
				t.Fatalf("started; want an error containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || strings.Contains(err.Error(), "line 0") {
				t.Errorf("error %q, want one containing %q and no line", err, tt.want)
			}
		})
	}
	// The failed start bound free (RESP) before it found the HTTP port taken,
	// and released it.
	ln, err := net.Listen("tcp", free)
	if err != nil {
		t.Fatalf("a failed Start left %s bound: %v", free, err)
	}
	ln.Close()
}

// TestStartSharedRegistry: a second server on one Registry is an error,
// not a panic, and leaves the first serving.
func TestStartSharedRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	first, err := Start(context.Background(), Config{RESP: "127.0.0.1:0", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := Start(context.Background(), Config{RESP: "127.0.0.1:0", Registry: reg})
	if err == nil {
		second.Close()
		t.Fatal("a second server on one Registry started")
	}
	if !strings.Contains(err.Error(), "metrics:") {
		t.Errorf("error %q, want a metrics registration error", err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: first.RESPAddr().String()})
	defer rdb.Close()
	if err := rdb.Ping(context.Background()).Err(); err != nil {
		t.Errorf("the first server after the second failed: %v", err)
	}
}

// TestStartMemoryFanoutFromFile: "fanout memory" in a config file fans a
// set out inside one server: its feeder and its instance share a log of
// their own.
func TestStartMemoryFanoutFromFile(t *testing.T) {
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE users (email text PRIMARY KEY)",
		"CREATE PUBLICATION bg_users FOR TABLE users",
		"INSERT INTO users VALUES ('before@example.com')")
	f, err := ParseConfig(strings.NewReader(`resp 127.0.0.1:0
set users {
  postgres ` + pg.DSN + `
  table users
  column email
  slot bg_users
  publication bg_users
  fanout memory
  fanout-unsigned yes
}
`))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	srv, err := Start(ctx, f.Config)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	pg.SQL(t, "INSERT INTO users VALUES ('after@example.com')")
	rdb := redis.NewClient(&redis.Options{Addr: srv.RESPAddr().String()})
	defer rdb.Close()
	testsvc.Eventually(t, 30*time.Second, func() bool {
		got, err := rdb.BFMExists(ctx, "users", "before@example.com", "after@example.com").Result()
		return srv.Ready() && err == nil && got[0] && got[1]
	}, "users not ready with both rows")
	if got, err := rdb.BFExists(ctx, "users", "never@example.com").Result(); err != nil || got {
		t.Errorf("a key never written: %v, %v (want absent)", got, err)
	}
	if r := srv.Store().Set("users").Status().Role; r != serve.RoleFeeder {
		t.Errorf("role %v, want the feeder", r)
	}
}

// TestListenStartFails: Listen serves before the sets' servers are
// checked; the set answers "maybe" and a failed check arrives on Err,
// wrapping ErrStart, with the message naming the set. Start returns that
// error itself.
func TestListenStartFails(t *testing.T) {
	dead := testsvc.FreeAddr(t) // nothing listens there
	set := SetConfig{
		Name:           "users",
		Source:         SourceConfig{Driver: SourcePostgres, DSN: "postgres://postgres@" + dead + "/postgres?sslmode=disable", Table: "users", Column: "email"},
		ConnectTimeout: time.Second,
	}
	srv, err := Listen(Config{RESP: "127.0.0.1:0", Sets: []SetConfig{set}})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.RESPAddr().String()})
	defer rdb.Close()
	if got, err := rdb.BFExists(context.Background(), "users", "anyone@example.com").Result(); err != nil || !got {
		t.Errorf("BF.EXISTS before the set is connected = %v, %v; want true (maybe)", got, err)
	}
	select {
	case err := <-srv.Err():
		if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `set "users": postgres:`) {
			t.Errorf("Err = %v; want ErrStart naming the set", err)
		}
	case <-srv.Started():
		t.Fatal("started with an unreachable database")
	}
	if srv.Ready() {
		t.Error("ready after a failed start")
	}

	_, err = Start(context.Background(), Config{RESP: "127.0.0.1:0", Sets: []SetConfig{set}})
	if !errors.Is(err, ErrStart) || !strings.Contains(err.Error(), `set "users": postgres:`) {
		t.Errorf("Start = %v; want ErrStart naming the set", err)
	}
}
