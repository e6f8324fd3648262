package postgres_test

import (
	"context"
	"errors"
	"net"
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
	r, err := postgres.NewPositionReader(ctx, dsn, time.Second)
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
	if _, err := admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%pg_current_wal_insert_lsn()' AND pid <> pg_backend_pid()"); err != nil {
		t.Fatal(err)
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
