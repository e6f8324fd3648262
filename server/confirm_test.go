package server

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/source/sqlite"
)

// TestConfirmCheckedAtStart: a confirm query that cannot run is reported
// when the set's source is opened (Start's error, or the set's reason when
// it is opened after Start returns), not at the first BG.EXISTS that
// reaches it; a good one lets the set become ready.
func TestConfirmCheckedAtStart(t *testing.T) {
	db := filepath.Join(t.TempDir(), "app.db")
	conn, err := sqlite.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec("CREATE TABLE users (email TEXT PRIMARY KEY); INSERT INTO users VALUES ('a@example.com')"); err != nil {
		t.Fatal(err)
	}
	conn.Close()
	for _, tt := range []struct{ confirm, want string }{
		{"SELEC 1 FROM users WHERE email = ?", "confirm query"},
		{"SELECT 1 FROM nosuch WHERE email = ?", "no such table"},
		{"SELECT 1 FROM users WHERE email = ?", ""},
	} {
		srv, err := Start(context.Background(), Config{Sets: []SetConfig{{Name: "s", RebuildOnly: true,
			Source: SourceConfig{Driver: SourceSQLite, DSN: db, Table: "users", Column: "email", Confirm: tt.confirm}}}})
		if err != nil {
			if tt.want == "" || !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `set "s": confirm`) {
				t.Errorf("%s: %v, want an error naming the set's confirm and %q", tt.confirm, err, tt.want)
			}
			continue
		}
		deadline := time.Now().Add(5 * time.Second)
		for {
			st, _ := srv.Store().SetStatus("s")
			if tt.want == "" && st.Ready {
				break
			}
			if tt.want != "" && strings.Contains(st.Reason, tt.want) && strings.Contains(st.Reason, "confirm") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: after 5 s: ready %v, reason %q; want %q", tt.confirm, st.Ready, st.Reason, tt.want)
			}
			time.Sleep(20 * time.Millisecond)
		}
		srv.Close()
	}
}
