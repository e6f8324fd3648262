package resp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/memfeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
)

// TestSetRefusedKey: a key the set's gate refuses (longer than its
// MaxKeyLen) is an error reply on BF.ADD and CF.ADD, and the server goes on
// answering (CF.ADD replied with a nil error and crashed the server). The
// gate answers "maybe" for such a key, so CF.ADDNX skips it: 0.
func TestSetRefusedKey(t *testing.T) {
	st, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{
		Name: "users", Source: memfeed.NewSource("a@example.com"), Family: filter.FamilyCuckoo,
	}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	testsvc.Eventually(t, time.Minute, st.Ready, "store not ready")
	addr, _ := startServer(t, Config{Store: st}, serve.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	ctx := context.Background()
	long := strings.Repeat("x", bloomgate.DefaultMaxKeyLen+1)
	for _, cmd := range []string{"BF.ADD", "CF.ADD"} {
		if err := rdb.Do(ctx, cmd, "users", long).Err(); err == nil || !strings.Contains(err.Error(), "key too long") {
			t.Errorf("%s of a key over MaxKeyLen: %v, want an error naming it", cmd, err)
		}
	}
	if n, err := rdb.Do(ctx, "CF.ADDNX", "users", long).Int(); err != nil || n != 0 {
		t.Errorf("CF.ADDNX of a key over MaxKeyLen = %v, %v; want 0", n, err)
	}
	if ok, err := rdb.Do(ctx, "BF.EXISTS", "users", "a@example.com").Bool(); err != nil || !ok {
		t.Errorf("BF.EXISTS after the refused adds = %v, %v", ok, err)
	}
}
