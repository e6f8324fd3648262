package jetstream_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// The scenario test runs feeders and instances as separate processes: this
// test binary again, with BLOOMGATE_FANOUT_ROLE set.
const roleEnv = "BLOOMGATE_FANOUT_ROLE"

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		if err := runRole(role); err != nil {
			fmt.Fprintln(os.Stderr, role+":", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	testsvc.DefaultParallel(4) // the parallel tests wait on NATS and PostgreSQL
	testsvc.Main(m)
}

// roleConfig is what the parent passes to a child, through the environment.
type roleConfig struct {
	urls, set, pgURL, table, slot, identity string
}

func (c roleConfig) env(role string) []string {
	return append(os.Environ(), roleEnv+"="+role, "BG_NATS="+c.urls, "BG_SET="+c.set, "BG_PG="+c.pgURL,
		"BG_TABLE="+c.table, "BG_SLOT="+c.slot, "BG_IDENTITY="+c.identity)
}

const (
	testLeaseTTL  = 2 * time.Second
	testMaxLag    = 2 * time.Second
	testHeartbeat = 100 * time.Millisecond
)

func runRole(role string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	c := roleConfig{os.Getenv("BG_NATS"), os.Getenv("BG_SET"), os.Getenv("BG_PG"), os.Getenv("BG_TABLE"), os.Getenv("BG_SLOT"), os.Getenv("BG_IDENTITY")}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	nc, err := connect(ctx, c.urls)
	if err != nil {
		return err
	}
	defer nc.Close()
	j, err := js.New(nc)
	if err != nil {
		return err
	}
	var set *jetstream.Set
	for try := 0; ; try++ {
		set, err = jetstream.Open(ctx, jetstream.Config{JetStream: j, Set: c.set, Replicas: 3, LeaseTTL: testLeaseTTL, MaxAge: time.Hour, Logger: logger})
		if err == nil || ctx.Err() != nil {
			break
		}
		if try%50 == 0 {
			logger.Warn("opening the set", "err", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		return err
	}
	pool, err := postgres.Connect(ctx, c.pgURL)
	if err != nil {
		return err
	}
	defer pool.Close()
	src, err := postgres.New(postgres.Config{Pool: pool, Table: c.table, Column: "email"})
	if err != nil {
		return err
	}
	g, err := bloomgate.New(bloomgate.Config{Source: src, Capacity: 400_000, Logger: logger})
	if err != nil {
		return err
	}
	defer g.Close()
	switch role {
	case "feeder":
		feed, err := postgres.NewFeed(postgres.FeedConfig{ConnString: c.pgURL, Table: c.table, Column: "email",
			Slot: c.slot, Publication: c.slot, StatusInterval: 100 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Logger: logger})
		if err != nil {
			return err
		}
		defer feed.Close()
		fol, err := g.Follower(bloomgate.FollowConfig{Identity: c.identity, SnapshotInterval: 3 * time.Second, MaxLag: testMaxLag})
		if err != nil {
			return err
		}
		f, err := set.NewFeeder(jetstream.FeederConfig{Feed: feed, Gate: fol, HeartbeatInterval: testHeartbeat,
			ID: fmt.Sprint("feeder-", os.Getpid())})
		if err != nil {
			return err
		}
		if err := f.Run(ctx); ctx.Err() == nil {
			return err
		}
		return nil
	case "instance":
		return runInstance(ctx, set, g, c.identity)
	}
	return fmt.Errorf("unknown role %q", role)
}

// runInstance follows the set and answers the parent over HTTP on a free
// loopback port, which it prints as "ADDR host:port".
//
//	GET /status -> "<ready 0|1> <position> <ms from start to first ready, -1>"
//	POST /check, lines "<key> <token>" -> lines "<MayContainAt 0|1> <ready 0|1>"
func runInstance(ctx context.Context, set *jetstream.Set, g *bloomgate.Gate, identity string) error {
	start := time.Now()
	inst, err := set.NewInstance(jetstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat})
	if err != nil {
		return err
	}
	go func() {
		err := g.Follow(ctx, inst, bloomgate.FollowConfig{Identity: identity, Snapshots: inst.Snapshots(), MaxLag: testMaxLag, SnapshotInterval: time.Hour})
		if ctx.Err() == nil {
			fmt.Fprintln(os.Stderr, "instance: Follow returned:", err)
			os.Exit(1)
		}
	}()
	var joinMs atomic.Int64
	joinMs.Store(-1)
	go func() {
		for ctx.Err() == nil && !g.Ready() {
			time.Sleep(time.Millisecond)
		}
		joinMs.Store(time.Since(start).Milliseconds())
	}()
	mux := http.NewServeMux()
	mux.HandleFunc("/status", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "%d %d %d\n", b2i(g.Ready()), uint64(g.Position()), joinMs.Load())
	})
	mux.HandleFunc("/check", func(w http.ResponseWriter, r *http.Request) {
		// Read the whole request before answering: the server stops
		// reading a request body once the response has started.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		sc := bufio.NewScanner(bytes.NewReader(body))
		bw := bufio.NewWriter(w)
		for sc.Scan() {
			key, tok, _ := strings.Cut(sc.Text(), " ")
			var pos uint64
			fmt.Sscan(tok, &pos)
			ready := g.Ready()
			may := g.MayContainAt([]byte(key), changefeed.Position(pos))
			fmt.Fprintf(bw, "%d %d\n", b2i(may), b2i(ready))
		}
		bw.Flush()
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	fmt.Printf("ADDR %s\n", l.Addr())
	srv := &http.Server{Handler: mux}
	go func() {
		<-ctx.Done()
		srv.Close()
	}()
	srv.Serve(l)
	return nil
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}
