package postgres_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// silentServer accepts connections and never answers, like a server that is
// stopped (SIGSTOP) or a network that drops replies. It returns its
// connection string.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable"
}

// TestFeedTimeouts: against a server that accepts and never answers, every
// call the feed makes returns an error wrapping changefeed.ErrTimeout within
// its Timeout (plus scheduling slack), never hangs until the caller's
// deadline; and a following gate says so in State, its metrics and its log
// at that moment.
func TestFeedTimeouts(t *testing.T) {
	t.Parallel() // a silent server of its own
	url := silentServer(t)
	const timeout = 300 * time.Millisecond
	const slack = 5 * time.Second // a loaded machine; a hang would take the caller's minute
	f, err := postgres.NewFeed(postgres.FeedConfig{ConnString: url, Table: "public.users", Column: "email", Timeout: timeout})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for name, call := range map[string]func() error{
		"Head":       func() error { _, err := f.Head(ctx); return err },
		"SlotStatus": func() error { _, err := f.SlotStatus(ctx); return err },
		"Bootstrap":  func() error { _, err := f.Bootstrap(ctx, func([]byte) error { return nil }); return err },
		"Rebuild":    func() error { _, err := f.Rebuild(ctx, func([]byte) error { return nil }); return err },
		"Estimate":   func() error { _, err := f.Estimate(ctx); return err },
		"Setup":      func() error { _, err := f.Setup(ctx, postgres.SetupOptions{}); return err },
		"Stream": func() error {
			// Stream retries a timeout on its own; Err says why meanwhile.
			sctx, scancel := context.WithCancel(ctx)
			defer scancel()
			go f.Stream(sctx, 1, func(changefeed.Txn) error { return nil })
			for deadline := time.Now().Add(timeout + slack); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				if err := f.Err(); err != nil {
					return err
				}
			}
			return nil
		},
		"Connect": func() error { _, err := postgres.Connect(ctx, url+"&connect_timeout=1"); return err },
	} {
		start := time.Now()
		err := call()
		took := time.Since(start)
		if name == "Connect" {
			if err == nil || took > time.Second+slack {
				t.Errorf("%s: %v after %v, want an error within its connect_timeout", name, err, took)
			}
			continue
		}
		if !errors.Is(err, changefeed.ErrTimeout) || took > timeout+slack {
			t.Errorf("%s: %v after %v, want changefeed.ErrTimeout within %v", name, err, took, timeout)
		}
	}

	var logs bytes.Buffer
	var lmu sync.Mutex
	g, err := bloomgate.New(bloomgate.Config{Logger: slog.New(slog.NewTextHandler(lockedWriter{&lmu, &logs}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	fctx, fcancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Follow(fctx, f, bloomgate.FollowConfig{}) }()
	defer func() { fcancel(); <-done }()
	start := time.Now()
	for {
		st, reason := g.State()
		lmu.Lock()
		logged := strings.Contains(logs.String(), "cause=timeout")
		lmu.Unlock()
		if st == bloomgate.StateDegraded && strings.Contains(reason, "timeout") && logged && g.Stats().FeedErrors > 0 {
			break
		}
		if time.Since(start) > timeout+slack {
			t.Fatalf("after %v: state %v %q, logged %v, feed errors %d", time.Since(start), st, reason, logged, g.Stats().FeedErrors)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if werr := g.WaitReady(ctxWithin(t, 50*time.Millisecond)); !errors.Is(werr, context.DeadlineExceeded) || !strings.Contains(werr.Error(), "timeout") {
		t.Fatalf("WaitReady: %v, want the deadline with the timeout as the reason", werr)
	}
}

func ctxWithin(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

type lockedWriter struct {
	mu *sync.Mutex
	w  *bytes.Buffer
}

func (l lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestBootstrapSaysWhatSlotCreationWaitsFor: a session idle in a
// transaction that wrote something stalls slot creation (PostgreSQL waits
// for it); the feed logs, within its Timeout, a warning naming that
// session, and the bootstrap completes once the transaction ends. As the
// superuser, and as the role feed setup creates, which sees no other
// role's transactions in pg_stat_activity.
func TestBootstrapSaysWhatSlotCreationWaitsFor(t *testing.T) {
	t.Parallel() // a cluster of its own: the transactions it holds open hold up no other test's slot creation
	dsn := testsvc.NewPostgres(t, testsvc.PGOptions{}).DSN
	t.Run("superuser", func(t *testing.T) {
		fx := feedFixtureOn(t, dsn, "")
		slotWaitNamesSession(t, fx.pool, fx.table, fx.cfg)
	})
	t.Run("setup role", func(t *testing.T) {
		fx := setupFixtureOn(t, dsn, "(id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, email text UNIQUE)")
		fx.setup(t, fx.table, postgres.SetupOptions{Role: fx.role})
		slotWaitNamesSession(t, fx.pool, fx.table, postgres.FeedConfig{ConnString: fx.connString(t, fx.role), Table: fx.table, Column: "email"})
	})
}

// slotWaitNamesSession opens a transaction that wrote to table on pool,
// bootstraps a feed of cfg and wants a warning naming that session's pid.
func slotWaitNamesSession(t *testing.T, pool *pgxpool.Pool, table string, cfg postgres.FeedConfig) {
	ctx := context.Background()
	tx, err := pool.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO "+table+" (email) VALUES ('open@x')"); err != nil {
		t.Fatal(err)
	}
	var pid int
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	var lmu sync.Mutex
	logged := func() string {
		lmu.Lock()
		defer lmu.Unlock()
		return logs.String()
	}
	// Short, so the warning comes soon; not so short that a busy machine
	// fails the feed's own requests.
	cfg.Timeout = time.Second
	cfg.Logger = slog.New(slog.NewTextHandler(lockedWriter{&lmu, &logs}, nil))
	f, err := postgres.NewFeed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	done := make(chan error, 1)
	go func() {
		_, err := f.Bootstrap(ctx, func([]byte) error { return nil })
		done <- err
	}()
	want := fmt.Sprintf("pid %d", pid)
	for deadline := time.Now().Add(30 * time.Second); ; {
		l := logged()
		if strings.Contains(l, "waits for transactions") && strings.Contains(l, want) {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("Bootstrap returned (%v) while a transaction it must wait for was open; logs:\n%s", err, l)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s: no warning naming the open transaction's session (%s); logs:\n%s", want, l)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Bootstrap after the commit: %v", err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Bootstrap still waiting a minute after the transaction committed")
	}
}
