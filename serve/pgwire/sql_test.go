package pgwire

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestParseTemplate(t *testing.T) {
	ok := []string{
		"SELECT id, email, name FROM public.users WHERE email = $1",
		"select * from public.users where email = $1;",
		"SELECT 1 FROM public.users WHERE email = $1::text",
		"SELECT 1 FROM public.users WHERE $1::varchar = email",
		"SELECT u.id FROM public.users u WHERE u.email = $1 AND u.deleted_at IS NULL",
		"SELECT id FROM public.users AS u WHERE active AND u.email = $1 ORDER BY id LIMIT 1",
		`SELECT "id" FROM public."users" WHERE "email" = $1 -- comment`,
		"SELECT id FROM public.users WHERE (status = 'a' AND kind <> 'b') AND email = $1 OFFSET 0",
		"SELECT DISTINCT id FROM public.users WHERE email = $1 /* a /* nested */ comment */",
		"SELECT id FROM public.users WHERE status IN ('a', 'b') AND email = $1 AND deleted_at IS NOT NULL",
		"SELECT id FROM public.users WHERE email = $1 AND tenant = $2",
		"SELECT id FROM public.users u WHERE $1 = u.tenant AND u.email = $2::text AND region = $3::varchar",
	}
	for _, s := range ok {
		if _, err := ParseTemplate(s, "users", "email"); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	bad := map[string]string{
		"SELECT count(*) FROM public.users WHERE email = $1":                        "function call",
		"SELECT id FROM public.users WHERE email = $1 OR true":                      `"OR"`,
		"SELECT id FROM public.users WHERE lower(email) = lower($1)":                "function call",
		"SELECT id FROM public.users WHERE email = $1 FOR UPDATE":                   `"FOR"`,
		"SELECT id FROM public.users WHERE email = $1 UNION SELECT 1":               `"UNION"`,
		"SELECT id FROM public.users LEFT JOIN t ON true WHERE email = $1":          `"LEFT"`,
		"SELECT id FROM public.users, t WHERE email = $1":                           "one table",
		"SELECT id FROM orders WHERE email = $1":                                    "not the set's table",
		"SELECT id FROM public.users WHERE name = $1":                               "conjunct email = $1",
		"SELECT id FROM public.users WHERE email = $2":                              "$1 is missing",
		"SELECT id FROM public.users WHERE email = $1 AND id = $3":                  "$2 is missing",
		"SELECT id FROM public.users WHERE email = $1 AND name = $1":                "used twice",
		"SELECT $2 FROM public.users WHERE email = $1":                              "compared with a bare column",
		"SELECT id FROM public.users WHERE email = $1 AND id > $2":                  "compared with a bare column",
		"SELECT id FROM public.users WHERE email = $1 AND NOT (tenant = $2)":        "compared with a bare column",
		"SELECT id FROM public.users WHERE email = $1 AND tenant IN ($2, 'x')":      "compared with a bare column",
		"SELECT id FROM public.users WHERE email = $1 AND lower(tenant) = $2":       "function call",
		"SELECT id FROM public.users WHERE email = $17":                             "want $1 to $16",
		"SELECT id FROM public.users WHERE email <> $1":                             "conjunct",
		"SELECT id FROM public.users WHERE NOT (email = $1)":                        "conjunct",
		"SELECT id FROM public.users WHERE email = $1::varchar(3)":                  "function call",
		"SELECT id FROM public.users WHERE email = $1::int":                         "conjunct",
		"SELECT id FROM public.users WHERE email = $1 AND id = 1/0":                 "operator",
		"SELECT id FROM public.users WHERE email = $1; DELETE FROM users":           "one statement",
		"WITH x AS (DELETE FROM users) SELECT 1 FROM public.users WHERE email = $1": "not a SELECT",
		"DELETE FROM public.users WHERE email = $1":                                 "not a SELECT",
		"SELECT id INTO t FROM public.users WHERE email = $1":                       `"INTO"`,
		"SELECT id FROM public.users WHERE id IN (SELECT 1) AND email = $1":         `"SELECT"`,
		"SELECT id FROM public.users WHERE email = $1 GROUP BY id":                  `"GROUP"`,
		"SELECT id FROM public.users WHERE id BETWEEN 1 AND 2 AND email = $1":       "BETWEEN",
		"SELECT id FROM public.users WHERE email = $1 LIMIT $1":                     "parameter",
		"SELECT id FROM public.users WHERE email = 'x":                              "unterminated",
		"SELECT id FROM public.users WHERE email = $1 AND (x":                       "parentheses",
	}
	for s, want := range bad {
		_, err := ParseTemplate(s, "users", "email")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want an error containing %s", s, err, want)
		}
	}
	if _, err := ParseTemplate("SELECT 1 FROM app.users WHERE email = $1", "other.users", "email"); err == nil {
		t.Error("another schema's table was accepted")
	}
	// A name the session's search_path resolves is refused, with the fix.
	for _, c := range []struct{ stmt, table, want string }{
		{"SELECT id FROM users WHERE email = $1", "users", "FROM users: name the table with its schema (FROM public.users)"},
		{`SELECT id FROM "Users" WHERE email = $1`, `app."Users"`, `FROM "Users": name the table with its schema (FROM app."Users")`},
		{"SELECT id FROM pg_temp.users WHERE email = $1", "users", "name the table with its schema (FROM public.users)"},
		{"SELECT id FROM pg_temp_3.users WHERE email = $1", "users", "name the table with its schema"},
	} {
		_, err := ParseTemplate(c.stmt, c.table, "email")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "search_path") {
			t.Errorf("%q (table %s): %v, want an error containing %s", c.stmt, c.table, err, c.want)
		}
	}
	if tp, err := ParseTemplate(`SELECT id FROM app."Users" WHERE email = $1`, `"Users"`, "email"); err != nil || tp.Table() != `"app"."Users"` {
		t.Errorf("Table() = %v, %v", tp, err)
	}
}

func TestMatchLiteral(t *testing.T) {
	tp, err := ParseTemplate("SELECT id, email FROM public.users WHERE email = $1", "users", "email")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		q    string
		key  string
		kind matchKind
	}{
		{"SELECT id, email FROM public.users WHERE email = 'a@b'", "a@b", matchString},
		{"select ID,EMAIL from public.USERS where EMAIL='a@b';", "a@b", matchString},
		{"SELECT id, email FROM public.users WHERE email = 'o''brien'", "o'brien", matchString},
		{`SELECT id, email FROM public.users WHERE email = 'back\slash'`, `back\slash`, matchString},
		{`SELECT id, email FROM public.users WHERE email = E'o\'b\\c\x41\101\u00e9\n'`, "o'b\\cAAé\n", matchEscape},
		{"SELECT id, email FROM public.users WHERE email = $$it's$$", "it's", matchEscape},
		{"SELECT id, email FROM public.users WHERE email = $q$x$$y$q$", "x$$y", matchEscape},
		{"SELECT id, email /* c */ FROM public.users\n-- c\nWHERE email = ''", "", matchString},
		{"SELECT id, email FROM public.users WHERE email = 5", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = 'a' 'b'", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = 'a'::text", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = $1", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = 'a'; SELECT 1", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = U&'a'", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = E'\\000'", "", matchNone},
		{"SELECT id, email FROM public.users WHERE email = E'\\xff'", "", matchNone},
		{`SELECT id, "email" FROM public.users WHERE email = 'a'`, "", matchNone},
	}
	for _, c := range cases {
		toks, _ := tokenize(c.q)
		key, kind := tp.match(toks, true)
		if kind != c.kind || key != c.key {
			t.Errorf("%q: %q %v, want %q %v", c.q, key, kind, c.key, c.kind)
		}
	}
	toks, _ := tokenize("select id, email from public.users where email = $1")
	if _, kind := tp.match(toks, false); kind != matchParam {
		t.Error("the statement itself does not match on the extended protocol")
	}
	cast, _ := ParseTemplate("SELECT 1 FROM public.users WHERE email = $1::text", "users", "email")
	toks, _ = tokenize("SELECT 1 FROM public.users WHERE email = 'k'::text")
	if key, kind := cast.match(toks, true); kind != matchString || key != "k" {
		t.Errorf("cast: %q %v", key, kind)
	}
	two, err := ParseTemplate("SELECT id FROM public.users WHERE tenant = $1 AND email = $2", "users", "email")
	if err != nil || two.Key() != 2 || two.Params() != 2 {
		t.Fatalf("two parameters: %v %+v", err, two)
	}
	for q, want := range map[string]matchKind{
		"SELECT id FROM public.users WHERE tenant = E't' AND email = $$k$$":   matchEscape,
		"SELECT id FROM public.users WHERE tenant = 't' AND email = E'k'":     matchString, // the tenant's '' literal
		"SELECT id FROM public.users WHERE tenant = E'\\xff' AND email = 'k'": matchNone,   // PostgreSQL's error
		"SELECT id FROM public.users WHERE tenant = 1 AND email = 'k'":        matchNone,
	} {
		toks, _ := tokenize(q)
		key, kind := two.match(toks, true)
		if kind != want || kind != matchNone && key != "k" {
			t.Errorf("%q: %q %v, want k %v", q, key, kind, want)
		}
	}
}

// FuzzTokenize: any text tokenizes or fails without panicking, and a
// template and its matcher agree with themselves.
func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"SELECT 1", "E'\\x4", "$a$", "/* /*", "'", `"a""b"`, "U&'x'", "1e+5", "$1::text", "E'\\U0010FFFF'"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		toks, err := tokenize(s)
		if err != nil {
			return
		}
		for _, tk := range toks {
			if tk.kind == tokString && tk.escape && !utf8.ValidString(tk.val) {
				t.Fatalf("%q: E string decoded to invalid UTF-8 %q", s, tk.val)
			}
		}
		if tp, err := ParseTemplate(s, "users", "email"); err == nil {
			if _, kind := tp.match(toks, false); kind != matchParam {
				t.Fatalf("%q: accepted template does not match itself", s)
			}
		}
	})
}

// FuzzLiteral: a key quoted as a client library quotes it (standard ” and
// E” with backslashes) decodes back to the key.
func FuzzLiteral(f *testing.F) {
	for _, s := range []string{"a@b", "o'brien", `\`, "é", "", "x\ny", "$$", "'\\'"} {
		f.Add(s)
	}
	tp, err := ParseTemplate("SELECT id FROM public.users WHERE email = $1", "users", "email")
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, key string) {
		if !utf8.ValidString(key) || strings.IndexByte(key, 0) >= 0 {
			return
		}
		plain := "SELECT id FROM public.users WHERE email = '" + strings.ReplaceAll(key, "'", "''") + "'"
		esc := "SELECT id FROM public.users WHERE email = E'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(key) + "'"
		for _, q := range []string{plain, esc} {
			toks, err := tokenize(q)
			if err != nil {
				t.Fatalf("%q: %v", q, err)
			}
			got, kind := tp.match(toks, true)
			if kind == matchNone || got != key {
				t.Fatalf("%q: %q %v, want %q", q, got, kind, key)
			}
		}
	})
}

// TestMatchFoldsASCIIOnly: PostgreSQL folds unquoted identifiers to lower
// case letter by letter in ASCII only (in a multibyte encoding), so that
// Über is another table than über: a statement naming it is not the set's.
func TestMatchFoldsASCIIOnly(t *testing.T) {
	tp, err := ParseTemplate("SELECT id FROM public.über WHERE email = $1", "über", "email")
	if err != nil {
		t.Fatal(err)
	}
	for q, want := range map[string]matchKind{
		"SELECT ID FROM public.ÜBER WHERE EMAIL = 'a'": matchNone,
		"SELECT ID FROM public.Über WHERE email = 'a'": matchNone,
		"SELECT ID FROM public.über WHERE EMAIL = 'a'": matchString,
	} {
		toks, err := tokenize(q)
		if err != nil {
			t.Fatal(err)
		}
		if _, kind := tp.match(toks, true); kind != want {
			t.Errorf("%s: match %v, want %v", q, kind, want)
		}
	}
}
