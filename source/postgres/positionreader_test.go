package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestPositionReader: each read lies between WritePosition read before it
// and after it; a read on a connection the server ended fails, and the
// next one connects again; a read allocates at most once (pgconn's
// command tag); Close ends it.
func TestPositionReader(t *testing.T) {
	dsn := testsvc.Postgres(t)
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(ctx)
	// Its own application_name, so that only its backend is ended below
	// (the shared cluster serves other tests' readers too).
	app := fmt.Sprintf("bloomgate-position-test-%d", time.Now().UnixNano())
	u, err := url.Parse(dsn)
	if err != nil {
		t.Fatal(err)
	}
	qs := u.Query()
	qs.Set("application_name", app)
	u.RawQuery = qs.Encode()
	r, err := postgres.NewPositionReader(ctx, u.String(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	between := func() {
		t.Helper()
		lo, err := postgres.WritePosition(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		// Something written, so that the position moves.
		if _, err := admin.Exec(ctx, "SELECT pg_logical_emit_message(false, 'bloomgate-test', 'x')"); err != nil {
			t.Fatal(err)
		}
		pos, err := r.Read(ctx)
		if err != nil {
			t.Fatal(err)
		}
		hi, err := postgres.WritePosition(ctx, admin)
		if err != nil {
			t.Fatal(err)
		}
		if pos <= lo || pos > hi {
			t.Fatalf("read %s, not in (%s, %s]", postgres.FormatLSN(pos), postgres.FormatLSN(lo), postgres.FormatLSN(hi))
		}
	}
	between()
	// Its backend ended: one read fails, the next reconnects.
	var ended int
	if err := admin.QueryRow(ctx, "WITH p AS MATERIALIZED (SELECT pid FROM pg_stat_activity WHERE application_name = $1) "+
		"SELECT count(*) FROM p WHERE pg_terminate_backend(p.pid)", app).Scan(&ended); err != nil || ended != 1 {
		t.Fatalf("ended %d backends of the reader, %v; want 1", ended, err)
	}
	testsvc.Eventually(t, 5*time.Second, func() bool {
		_, err := r.Read(ctx)
		return err == nil
	}, "no read after the backend was terminated")
	between()
	if a := testing.AllocsPerRun(200, func() {
		if _, err := r.Read(ctx); err != nil {
			t.Fatal(err)
		}
	}); a > 1 {
		t.Errorf("%v allocations per read, want at most 1", a)
	}
	r.Close()
	r.Close()
	if _, err := r.Read(ctx); !errors.Is(err, postgres.ErrReaderClosed) {
		t.Errorf("read after Close: %v, want ErrReaderClosed", err)
	}
}

// TestPositionReaderTimeout: a server that accepts and never answers gives
// an error within the reader's timeout, not a hang.
func TestPositionReaderTimeout(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			defer c.Close()
		}
	}()
	start := time.Now()
	_, err = postgres.NewPositionReader(context.Background(), "postgres://u@"+ln.Addr().String()+"/db?sslmode=disable", 200*time.Millisecond)
	if err == nil {
		t.Fatal("connected to a server that never answers")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took %v with a 200ms timeout", d)
	}
}
