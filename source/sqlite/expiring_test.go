package sqlite_test

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/source/sqlite"
)

// TestExpiringScan reads keys with expiries written as Unix seconds
// (integer and real) and as text, skipping NULLs, and refuses a value that
// is not a time.
func TestExpiringScan(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	if _, err := db.ExecContext(ctx, `CREATE TABLE r (jti TEXT, exp);
		INSERT INTO r VALUES ('int', 1796083200), ('real', 1796083200.5), ('text', '2026-12-01 00:00:00'),
		('rfc', '2026-12-01T00:00:00Z'), (NULL, 1), ('null', NULL)`); err != nil {
		t.Fatal(err)
	}
	got := map[string]time.Time{}
	e := sqlite.Expiring{DB: db, Table: "r", KeyColumn: "jti", ExpiresColumn: "exp"}
	if err := e.ScanExpiring(ctx, func(k []byte, exp time.Time) error {
		got[string(k)] = exp
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	want := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	for k, w := range map[string]time.Time{"int": want, "real": want.Add(500 * time.Millisecond), "text": want, "rfc": want} {
		if !got[k].Equal(w) {
			t.Errorf("%s: %v, want %v", k, got[k], w)
		}
	}
	if len(got) != 4 {
		t.Errorf("%d rows, want 4: %v", len(got), got)
	}
	bad := sqlite.Expiring{DB: db, Query: "SELECT 'x', 'tomorrow'"}
	if err := bad.ScanExpiring(ctx, func([]byte, time.Time) error { return nil }); !errors.Is(err, sqlite.ErrBadExpiringQuery) {
		t.Errorf("text that is no time: %v", err)
	}
	one := sqlite.Expiring{DB: db, Query: "SELECT 'x'"}
	if err := one.ScanExpiring(ctx, func([]byte, time.Time) error { return nil }); !errors.Is(err, sqlite.ErrBadExpiringQuery) {
		t.Errorf("one column: %v", err)
	}
}
