package postgres_test

import (
	"context"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestConfirmCheck: a confirm query that cannot run, or takes another
// number of parameters than the key, fails Check; a good one passes.
func TestConfirmCheck(t *testing.T) {
	pg := testsvc.LogicalPostgres(t)
	pg.SQL(t, "CREATE TABLE users (email text PRIMARY KEY, tenant int)")
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	for _, tt := range []struct{ query, want string }{
		{"SELECT 1 FROM users WHERE email = $1", ""},
		{"SELEC 1 FROM users WHERE email = $1", "syntax error"},
		{"SELECT 1 FROM nosuch WHERE email = $1", "does not exist"},
		{"SELECT 1 FROM users WHERE email = $1 AND tenant = $2", "takes 2 parameters"},
		{"SELECT 1 FROM users", "takes 0 parameters"},
	} {
		err := postgres.Confirm{Pool: pool, Query: tt.query}.Check(ctx)
		if tt.want == "" && err != nil || tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: %v, want %q", tt.query, err, tt.want)
		}
	}
}
