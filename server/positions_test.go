package server_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/server"
)

// TestStartPositions: a server reads read-your-writes positions in its
// PostgreSQL source's notation (an LSN) or as a decimal integer, as
// docs/serve.md says, whatever sets it has: the token is read before the set
// is looked up.
func TestStartPositions(t *testing.T) {
	ctx := context.Background()
	srv, err := server.Start(ctx, server.Config{RESP: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	rdb := redis.NewClient(&redis.Options{Addr: srv.RESPAddr().String()})
	defer rdb.Close()
	for token, want := range map[string]string{
		"16/B374D848": "ERR no such table-backed set",
		"12":          "ERR no such table-backed set",
		"nope":        "ERR position is not an LSN such as 16/B374D848 or a decimal integer",
	} {
		err := rdb.Do(ctx, "BF.EXISTSAT", "users", "k", token).Err()
		if err == nil || err.Error() != want {
			t.Errorf("BF.EXISTSAT users k %s: %v, want %q", token, err, want)
		}
	}
}
