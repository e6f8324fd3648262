package server

import (
	"strings"
	"testing"
	"time"
)

// TestParsePostgresFront: the front end's keys, and answer given more than
// once in a set.
func TestParsePostgresFront(t *testing.T) {
	f, err := ParseConfig(strings.NewReader(`postgres-listen 127.0.0.1:6432
postgres-upstream postgres://db.internal:5432/?sslmode=require
postgres-maxclients 50
postgres-max-message-size 1mb
postgres-position-wait 250ms
set users {
  postgres postgres://app@127.0.0.1:5432/app
  table users
  column email
  answer "SELECT id FROM public.users WHERE email = $1"
  answer "SELECT 1 FROM public.users WHERE email = $1::text"
}
`))
	if err != nil {
		t.Fatal(err)
	}
	p := f.PostgresFront
	if p.Listen != "127.0.0.1:6432" || p.Upstream != "postgres://db.internal:5432/?sslmode=require" || p.MaxConns != 50 || p.MaxMessageSize != 1<<20 ||
		p.PositionWait != 250*time.Millisecond || len(f.Sets[0].Answers) != 2 || f.Sets[0].Answers[1] != "SELECT 1 FROM public.users WHERE email = $1::text" {
		t.Errorf("parsed as %+v, answers %q", p, f.Sets[0].Answers)
	}
}

func TestParsePostgresFrontErrors(t *testing.T) {
	set := func(body string) string {
		return "postgres-listen 127.0.0.1:6432\npostgres-upstream 127.0.0.1:5432\nset users {\n" + body + "\n}\n"
	}
	for conf, want := range map[string]string{
		set("postgres postgres://a@b/c\ntable users\ncolumn email\nanswer \"SELECT max(id) FROM public.users WHERE email = $1\""):       `line 3: set "users": answer "SELECT max(id) FROM public.users WHERE email = $1": function call max(…)`,
		set("postgres postgres://a@b/c\ntable users\ncolumn email\nfollow no\nanswer \"SELECT id FROM public.users WHERE email = $1\""): "answer: the PostgreSQL front end answers only from a set that follows",
		// An unqualified table means what each session's search_path makes it.
		set("postgres postgres://a@b/c\ntable users\ncolumn email\nanswer \"SELECT id, email, name FROM users WHERE email = $1\""): `line 3: set "users": answer "SELECT id, email, name FROM users WHERE email = $1": FROM users: name the table with its schema (FROM public.users): an unqualified name means what each session's search_path makes it`,
		set("postgres postgres://a@b/c\ntable users\ncolumn email\nanswer \"SELECT 1 FROM pg_temp.users WHERE email = $1\""):       `FROM pg_temp.users: name the table with its schema (FROM public.users)`,
		set("postgres postgres://a@b/c\ntable users\ncolumn email\nanswer"):                                                        "want a statement",
		"postgres-upstream localhost\n":                        "postgres-upstream: want the PostgreSQL server's host:port",
		"postgres-upstream postgres://db/?sslmode=sometimes\n": "line 1: postgres-upstream: want the PostgreSQL server's host:port or a postgres:// URL: pgwire: upstream: cannot parse `postgres://db/?sslmode=sometimes`: failed to configure TLS (sslmode is invalid)",
		"postgres-max-message-size 10\n":                       "want a size from 1kb to 1gb",
		"postgres-position-wait 0s\n":                          "want a duration above zero",
		"postgres-listen 127.0.0.1:6432\n":                     "give postgres-upstream",
		"postgres-listen 127.0.0.1:6432\npostgres-listen 127.0.0.1:6433\npostgres-upstream a:1\n": "given twice",
	} {
		_, err := ParseConfig(strings.NewReader(conf))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", conf, err, want)
		}
	}
}
