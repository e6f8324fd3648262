package resp

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/serve"
)

type testClock struct{ ns atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *testClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

// TestExpiringCommands drives BG.X* through go-redis in RESP3 and RESP2 on
// an injected clock: replies, expiry forms, errors and the item's life.
func TestExpiringCommands(t *testing.T) {
	for _, proto := range []int{3, 2} {
		t.Run(fmt.Sprint("RESP", proto), func(t *testing.T) {
			t.Parallel()
			clock := &testClock{}
			clock.ns.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
			addr, _ := startServer(t, Config{}, serve.Config{Now: clock.Now})
			rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			defer rdb.Close()
			ctx := context.Background()
			do := func(args ...any) *redis.Cmd { return rdb.Do(ctx, args...) }
			wantErr := func(prefix string, args ...any) {
				t.Helper()
				if err := do(args...).Err(); err == nil || !strings.HasPrefix(err.Error(), prefix) {
					t.Errorf("%v: %v, want an error starting %q", args, err, prefix)
				}
			}
			if err := do("BG.XRESERVE", "revoked", "0.001", 70000, 3600).Err(); err != nil {
				t.Fatal(err)
			}
			now := clock.Now()
			for _, tt := range []struct {
				item string
				args []any
			}{
				{"ex", []any{"EX", 60}},
				{"px", []any{"PX", 60000}},
				{"exat", []any{"EXAT", now.Add(time.Minute).Unix()}},
				{"pxat", []any{"pxat", now.Add(time.Minute).UnixMilli()}},
			} {
				if ok, err := do(append([]any{"BG.XADD", "revoked", tt.item}, tt.args...)...).Bool(); err != nil || !ok {
					t.Errorf("BG.XADD %s %v = %v, %v", tt.item, tt.args, ok, err)
				}
			}
			if ok, err := do("BG.XADD", "revoked", "ex", "EX", 120).Bool(); err != nil || ok {
				t.Errorf("BG.XADD of a present item = %v, %v; want 0", ok, err)
			}
			if got, err := do("BG.XMADD", "revoked", "EX", 30, "m1", "m2").BoolSlice(); err != nil || len(got) != 2 || !got[0] || !got[1] {
				t.Errorf("BG.XMADD = %v, %v", got, err)
			}
			if got, err := do("BG.XMEXISTS", "revoked", "ex", "px", "exat", "pxat", "m1", "nope").BoolSlice(); err != nil ||
				fmt.Sprint(got) != "[true true true true true false]" {
				t.Errorf("BG.XMEXISTS = %v, %v", got, err)
			}
			if typ, _ := rdb.Type(ctx, "revoked").Result(); typ != "BGexpire-" {
				t.Errorf("TYPE = %q", typ)
			}
			if n, _ := do("BG.XINFO", "revoked", "ITEMS").Int64Slice(); proto == 2 && (len(n) != 1 || n[0] != 7) {
				t.Errorf("BG.XINFO ITEMS = %v", n)
			}
			info, err := do("BG.XINFO", "revoked").Result()
			if err != nil {
				t.Fatal(err)
			}
			s := fmt.Sprint(info)
			for _, want := range []string{"Capacity", "70000", "Max TTL", "3600", "0.001", "Number of items", "Next expiry"} {
				if !strings.Contains(s, want) {
					t.Errorf("BG.XINFO = %s, missing %q", s, want)
				}
			}

			wantErr("ERR wrong number of arguments for 'bg.xadd'", "BG.XADD", "revoked", "x")
			wantErr("ERR wrong number of arguments for 'bg.xreserve'", "BG.XRESERVE", "k", "0.01", 10)
			wantErr("ERR syntax error", "BG.XADD", "revoked", "x", "KEEPTTL", 1)
			wantErr("ERR value is not an integer", "BG.XADD", "revoked", "x", "EX", "soon")
			wantErr("ERR invalid expire time in 'bg.xadd'", "BG.XADD", "revoked", "x", "EX", 0)
			wantErr("ERR invalid expire time in 'bg.xmadd'", "BG.XMADD", "revoked", "PX", -5, "x")
			wantErr("ERR expiry is in the past", "BG.XADD", "revoked", "x", "EXAT", now.Add(-time.Second).Unix())
			wantErr("ERR expiry is further ahead than the key's max TTL", "BG.XADD", "revoked", "x", "EX", 3601)
			wantErr("ERR expiry is further ahead than the key's max TTL", "BG.XADD", "revoked", "x", "EX", int64(1)<<62)
			wantErr("ERR not found", "BG.XADD", "missing", "x", "EX", 10)
			wantErr("ERR item exists", "BG.XRESERVE", "revoked", "0.01", 10, 10)
			wantErr("ERR bad error rate", "BG.XRESERVE", "k", "often", 10, 10)
			wantErr("ERR error rate must be in the range (0.000000, 1.000000)", "BG.XRESERVE", "k", "1.5", 10, 10)
			wantErr("ERR error rate must be in the range (0.000000, 1.000000)", "BG.XRESERVE", "k", "0", 10, 10)
			wantErr("ERR error rate must be in the range (0.000000, 1.000000)", "BG.XRESERVE", "k", "-0.01", 10, 10)
			wantErr("ERR bad capacity", "BG.XRESERVE", "k", "0.01", "many", 10)
			wantErr("ERR capacity must be in the range [1, 1073741824]", "BG.XRESERVE", "k", "0.01", 0, 10)
			wantErr("ERR capacity must be in the range [1, 1073741824]", "BG.XRESERVE", "k", "0.01", int64(1)<<31, 10)
			wantErr("ERR generations must be in the range [2, 64]", "BG.XRESERVE", "k", "0.01", 10, 10, "GENERATIONS", 0)
			wantErr("ERR generations must be in the range [2, 64]", "BG.XRESERVE", "k", "0.01", 10, 10, "GENERATIONS", 1)
			wantErr("ERR bad generations", "BG.XRESERVE", "k", "0.01", 10, 10, "GENERATIONS", "x")
			wantErr("ERR bad max TTL", "BG.XRESERVE", "k", "0.01", 10, 0)
			wantErr("ERR max TTL must be in the range [1 ms, 315360000 s]", "BG.XRESERVE", "k", "0.01", 10, 315360001)
			wantErr("ERR max TTL must be in the range [1 ms, 315360000 s]", "BG.XRESERVE", "k", "0.01", 10, int64(1)<<62)
			wantErr("ERR generations must be in the range [2, 64]", "BG.XRESERVE", "k", "0.01", 10, 10, "GENERATIONS", 65)
			wantErr("ERR syntax error", "BG.XRESERVE", "k", "0.01", 10, 10, "NONSCALING")
			wantErr("Invalid information value", "BG.XINFO", "revoked", "BOGUS")
			wantErr("ERR not found", "BG.XINFO", "missing")
			if err := rdb.BFAdd(ctx, "bf", "a").Err(); err != nil {
				t.Fatal(err)
			}
			wantErr("WRONGTYPE", "BG.XADD", "bf", "a", "EX", 10)
			wantErr("WRONGTYPE", "BG.XEXISTS", "bf", "a")
			wantErr("WRONGTYPE", "BG.XINFO", "bf")
			wantErr("WRONGTYPE", "BF.ADD", "revoked", "a")
			wantErr("WRONGTYPE", "CF.ADD", "revoked", "a")
			// A missing key is an error, not "absent": a revocation check
			// against a key never reserved (a typo, a lost volume) must not
			// pass every token.
			// Absolute expiries past any max TTL, however large (they
			// overflowed into the past).
			wantErr("ERR expiry is further ahead than the key's max TTL", "BG.XADD", "revoked", "a", "EXAT", "9223372036854775807")
			wantErr("ERR expiry is further ahead than the key's max TTL", "BG.XADD", "revoked", "a", "PXAT", "9223372036854775807")
			wantErr("ERR not found", "BG.XEXISTS", "missing", "a")
			wantErr("ERR not found", "BG.XMEXISTS", "missing", "a", "b")
			// BF.EXISTS on an expiring key answers as BG.XEXISTS.
			if ok, err := rdb.BFExists(ctx, "revoked", "m1").Result(); err != nil || !ok {
				t.Errorf("BF.EXISTS on an expiring key = %v, %v", ok, err)
			}
			if ok, err := rdb.CFExists(ctx, "revoked", "m1").Result(); err != nil || !ok {
				t.Errorf("CF.EXISTS on an expiring key = %v, %v", ok, err)
			}
			if n, err := rdb.CFCount(ctx, "revoked", "m1").Result(); err != nil || n != 1 {
				t.Errorf("CF.COUNT on an expiring key = %v, %v", n, err)
			}

			// m1, m2 expire at +30 s; the others at +60 s. A window is
			// 3600/7 s, so +30 s and +60 s share the window ending at
			// 00:08:34.3 and are dropped together after it.
			clock.Advance(60 * time.Second)
			if got, _ := do("BG.XMEXISTS", "revoked", "ex", "pxat").BoolSlice(); !got[0] || !got[1] {
				t.Errorf("at their expiry: %v, want present", got)
			}
			clock.Advance(10 * time.Minute)
			if got, _ := do("BG.XMEXISTS", "revoked", "ex", "px", "exat", "pxat", "m1", "m2").BoolSlice(); fmt.Sprint(got) != "[false false false false false false]" {
				t.Errorf("a window after their expiry: %v, want all absent", got)
			}
			if n, _ := do("BG.XINFO", "revoked", "GENERATIONS").Int64Slice(); proto == 2 && (len(n) != 1 || n[0] != 0) {
				t.Errorf("generations after expiry = %v, want [0]", n)
			}
			if n, err := rdb.Del(ctx, "revoked").Result(); n != 1 || err != nil {
				t.Errorf("DEL = %d, %v", n, err)
			}
		})
	}
}
