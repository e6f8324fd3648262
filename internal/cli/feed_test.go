package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// testPostgres returns the URL of a fresh database on the test binary's
// private cluster with wal_level=logical, and a fresh name; the publication
// and role named after it are dropped afterwards.
func testPostgres(t *testing.T) (url, name string, exec func(string)) {
	t.Helper()
	url = testsvc.LogicalPostgres(t).DSN
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	var b [6]byte
	rand.Read(b[:])
	name = "bg_cli_" + hex.EncodeToString(b[:])
	exec = func(q string) {
		t.Helper()
		if _, err := pool.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	t.Cleanup(func() {
		for _, q := range []string{"DROP SCHEMA IF EXISTS " + name + " CASCADE", "DROP PUBLICATION IF EXISTS " + name,
			"DROP OWNED BY " + name, "DROP ROLE IF EXISTS " + name} {
			pool.Exec(ctx, q)
		}
		pool.Close()
	})
	return url, name, exec
}

func TestFeedSetup(t *testing.T) {
	url, name, exec := testPostgres(t)
	exec("CREATE SCHEMA " + name)
	exec("CREATE TABLE " + name + ".users (id int PRIMARY KEY, email text NOT NULL UNIQUE)")
	args := []string{"feed", "setup", "-postgres", url, "-table", name + ".users", "-column", "email", "-role", name, "-publication", name}

	code, out, errOut := run(args...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{
		`CREATE PUBLICATION "` + name + `" FOR TABLE "` + name + `"."users";`,
		`CREATE ROLE "` + name + `" WITH LOGIN REPLICATION;`,
		`GRANT SELECT ON "` + name + `"."users" TO "` + name + `";`,
		`REPLICA IDENTITY USING INDEX "users_email_key"`,
		"-- wal_level: logical",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, " WHERE ") {
		t.Errorf("publication with a row filter:\n%s", out)
	}
	if code, _, errOut := run(append(args, "-run")...); code != 0 {
		t.Fatalf("-run: exit %d: %s", code, errOut)
	}
	// Now in place: only the idempotent grants remain, and the feed accepts
	// the publication.
	code, out, _ = run(args...)
	if code != 0 || strings.Contains(out, "CREATE ") {
		t.Fatalf("after -run (exit %d):\n%s", code, out)
	}
	// A row-filtered publication is replaced by an unfiltered one.
	exec("ALTER PUBLICATION " + name + " SET TABLE " + name + ".users WHERE (id > 0)")
	if _, out, _ = run(args...); !strings.Contains(out, `ALTER PUBLICATION "`+name+`" SET TABLE "`+name+`"."users";`) {
		t.Fatalf("row filter not removed:\n%s", out)
	}
	if code, _, _ := run("feed", "status", "-postgres", url, "-table", name+".users", "-column", "email", "-slot", name); code != 1 {
		t.Fatalf("status of a missing slot: exit %d, want 1", code)
	}
}

func TestFeedUsage(t *testing.T) {
	for _, args := range [][]string{{"feed"}, {"feed", "nope"}, {"feed", "setup", "-table", "t"}, {"feed", "status", "-column", "c"}} {
		if code, _, errOut := run(args...); code != 2 || !strings.Contains(errOut, "usage") {
			t.Errorf("%q: exit %d, stderr %q", args, code, errOut)
		}
	}
}

// TestFeedHelpDefaultName: -h of feed setup and feed status names the
// default slot as the feed makes it (schema included).
func TestFeedHelpDefaultName(t *testing.T) {
	want := postgres.DefaultName("public.users", "email")
	for _, sub := range []string{"setup", "status"} {
		_, _, errOut := run("feed", sub, "-h")
		if !strings.Contains(errOut, "bloomgate_<schema>_<table>_<column>") || !strings.Contains(errOut, want) {
			t.Errorf("feed %s -h does not name the default slot %s:\n%s", sub, want, errOut)
		}
	}
}

func TestWALLevelMessage(t *testing.T) {
	err := postgres.SetupPlan{WALLevel: "replica"}.CheckWALLevel()
	if !errors.Is(err, postgres.ErrWALLevel) || !strings.Contains(err.Error(), "ALTER SYSTEM SET wal_level = logical") ||
		!strings.Contains(err.Error(), `"replica"`) {
		t.Fatalf("CheckWALLevel: %v", err)
	}
	if err := (postgres.SetupPlan{WALLevel: "logical"}).CheckWALLevel(); err != nil {
		t.Fatal(err)
	}
}

// TestFeedStatusTimeout: `feed status` against a server that accepts and
// never answers exits 1 with a timeout error within about its -timeout, not
// after minutes.
func TestFeedStatusTimeout(t *testing.T) {
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
			defer c.Close() // held open, never answered
		}
	}()
	url := "postgres://postgres@" + ln.Addr().String() + "/postgres?sslmode=disable"
	start := time.Now()
	code, _, errOut := run("feed", "status", "-postgres", url, "-table", "public.users", "-column", "email", "-timeout", "300ms")
	if took := time.Since(start); code != 1 || !strings.Contains(errOut, "no answer") || took > 10*time.Second {
		t.Fatalf("exit %d after %v: %s", code, took, errOut)
	}
}
