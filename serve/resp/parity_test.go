package resp

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/serve"
)

func parityClient(t *testing.T) (*redis.Client, context.Context) {
	t.Helper()
	addr, _ := startServer(t, Config{}, serve.Config{})
	rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: 2})
	t.Cleanup(func() { rdb.Close() })
	return rdb, context.Background()
}

// replyText returns a command's reply, or its error text.
func replyText(ctx context.Context, rdb *redis.Client, args ...any) string {
	v, err := rdb.Do(ctx, args...).Result()
	if err != nil {
		return err.Error()
	}
	return fmt.Sprint(v)
}

// TestWrongTypeEverywhere: every BF.* write or info command on a cuckoo key
// and every CF.* one on a Bloom key answers WRONGTYPE, as RedisBloom (the
// EXISTS family and CF.COUNT treat the key as empty instead).
func TestWrongTypeEverywhere(t *testing.T) {
	rdb, ctx := parityClient(t)
	if err := rdb.Do(ctx, "BF.ADD", "bf", "a").Err(); err != nil {
		t.Fatal(err)
	}
	if err := rdb.Do(ctx, "CF.ADD", "cf", "a").Err(); err != nil {
		t.Fatal(err)
	}
	const wrongType = "WRONGTYPE Operation against a key holding the wrong kind of value"
	for _, args := range [][]any{
		{"BF.RESERVE", "cf", "0.01", "100"},
		{"CF.RESERVE", "bf", "100"},
		{"BF.ADD", "cf", "x"},
		{"BF.MADD", "cf", "x"},
		{"BF.INSERT", "cf", "ITEMS", "x"},
		{"BF.INFO", "cf"},
		{"BF.CARD", "cf"},
		{"BF.SCANDUMP", "cf", "0"},
		{"BF.LOADCHUNK", "cf", "1", "junk"},
		{"CF.ADD", "bf", "x"},
		{"CF.ADDNX", "bf", "x"},
		{"CF.INSERT", "bf", "ITEMS", "x"},
		{"CF.INSERTNX", "bf", "ITEMS", "x"},
		{"CF.DEL", "bf", "a"},
		{"CF.INFO", "bf"},
		{"CF.SCANDUMP", "bf", "0"},
		{"CF.LOADCHUNK", "bf", "1", "junk"},
	} {
		if got := replyText(ctx, rdb, args...); got != wrongType {
			t.Errorf("%v: %q, want WRONGTYPE", args, got)
		}
	}
	for _, args := range [][]any{{"BF.EXISTS", "cf", "a"}, {"CF.EXISTS", "bf", "a"}, {"CF.COUNT", "bf", "a"}} {
		if got := replyText(ctx, rdb, args...); got != "0" {
			t.Errorf("%v: %q, want 0 (RedisBloom treats the key as empty)", args, got)
		}
	}
}

// TestExpansionLimits: one validation layer, RedisBloom's ranges
// everywhere.
func TestExpansionLimits(t *testing.T) {
	rdb, ctx := parityClient(t)
	for _, tt := range []struct {
		args []any
		want string
	}{
		{[]any{"BF.RESERVE", "e100", "0.01", "100", "EXPANSION", "100"}, "OK"},
		{[]any{"BF.INFO", "e100", "EXPANSION"}, "[100]"},
		{[]any{"BF.RESERVE", "e40k", "0.01", "100", "EXPANSION", "40000"}, "ERR expansion must be in the range [0, 32768]"},
		{[]any{"BF.INSERT", "i100", "EXPANSION", "100", "ITEMS", "a"}, "[true]"},
		{[]any{"BF.INSERT", "i40k", "EXPANSION", "40000", "ITEMS", "a"}, "Bad expansion"},
		{[]any{"BF.INSERT", "i100", "EXPANSION", "40000", "ITEMS", "a"}, "Bad expansion"}, // checked on an existing key too
		{[]any{"BF.INSERT", "cap", "CAPACITY", "2000000000", "ITEMS", "a"}, "Bad capacity"},
		{[]any{"BF.RESERVE", "cap", "0.01", "2000000000"}, "ERR capacity must be in the range [1, 1073741824]"},
		{[]any{"CF.RESERVE", "c40k", "100", "EXPANSION", "40000"}, "EXPANSION: value must be in the range [0, 32768]"},
		{[]any{"CF.RESERVE", "cbig", "2000000000"}, "Capacity must be in the range [2 * BUCKETSIZE, 1073741824]"},
		{[]any{"CF.INSERT", "cbig", "CAPACITY", "2000000000", "ITEMS", "a"}, "Capacity must be in the range [cf-bucket-size * 2, 1073741824]"},
	} {
		got := replyText(ctx, rdb, tt.args...)
		if tt.want == "[true]" {
			tt.want = "[1]"
		}
		if got != tt.want {
			t.Errorf("%v: %q, want %q", tt.args, got, tt.want)
		}
	}
	// A filter with expansion 100 grows (by at most 64 times per step).
	for i := range 300 {
		if err := rdb.Do(ctx, "BF.ADD", "e100", fmt.Sprint("x", i)).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if got := replyText(ctx, rdb, "BF.INFO", "e100", "FILTERS"); got != "[2]" {
		t.Errorf("filters after 300 adds to a 100-item filter: %s, want [2]", got)
	}
}

// TestCuckooCounts: CF.INFO's "Number of items inserted" is the items held
// (it goes down on CF.DEL), and a filter that may not grow holds no more
// items than RedisBloom's table for the same parameters has slots: capacity
// 4, bucket size 2 is 2 buckets of 2 slots.
func TestCuckooCounts(t *testing.T) {
	rdb, ctx := parityClient(t)
	if err := rdb.Do(ctx, "CF.RESERVE", "c", "1000").Err(); err != nil {
		t.Fatal(err)
	}
	for _, it := range []string{"a", "b", "c"} {
		rdb.Do(ctx, "CF.ADD", "c", it)
	}
	rdb.Do(ctx, "CF.DEL", "c", "a")
	info, err := rdb.CFInfo(ctx, "c").Result()
	if err != nil || info.NumItemsInserted != 2 || info.NumItemsDeleted != 1 {
		t.Errorf("CF.INFO after 3 adds and 1 delete: %+v, %v; want 2 inserted, 1 deleted", info, err)
	}

	if err := rdb.Do(ctx, "CF.RESERVE", "small", "4", "EXPANSION", "0").Err(); err != nil {
		t.Fatal(err)
	}
	accepted := 0
	for i := range 23 {
		err := rdb.Do(ctx, "CF.ADD", "small", fmt.Sprint("item", i)).Err()
		switch {
		case err == nil:
			accepted++
		case !strings.Contains(err.Error(), "Filter is full"):
			t.Fatalf("CF.ADD %d: %v", i, err)
		}
	}
	if accepted != 4 {
		t.Errorf("a 4-slot filter without expansion accepted %d of 23 items, want 4", accepted)
	}
	// A delete makes room for one more.
	rdb.Do(ctx, "CF.DEL", "small", "item0")
	if err := rdb.Do(ctx, "CF.ADD", "small", "again").Err(); err != nil {
		t.Errorf("CF.ADD after a delete: %v", err)
	}
}

// TestCuckooReserveDifferences pins what docs/serve.md says next to
// CF.RESERVE: BUCKETSIZE 1 is accepted and uses buckets of 2; EXPANSION 3
// is reported as given; a growing filter has at most 20 sub-filters (RedisBloom's
// cf-max-expansions allows 32), after which an item that does not fit is
// refused with "Maximum expansions reached".
func TestCuckooReserveDifferences(t *testing.T) {
	rdb, ctx := parityClient(t)
	info := func(key string) map[string]int64 {
		t.Helper()
		v, err := rdb.Do(ctx, "CF.INFO", key).Slice()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]int64{}
		for i := 0; i+1 < len(v); i += 2 {
			n, _ := v[i+1].(int64)
			m[v[i].(string)] = n
		}
		return m
	}
	if err := rdb.Do(ctx, "CF.RESERVE", "c", 4, "BUCKETSIZE", 1, "EXPANSION", 3).Err(); err != nil {
		t.Fatal(err)
	}
	if m := info("c"); m["Bucket size"] != 2 || m["Expansion rate"] != 3 || m["Number of filters"] != 1 {
		t.Fatalf("CF.INFO after CF.RESERVE c 4 BUCKETSIZE 1 EXPANSION 3: %v", m)
	}
	// The same item over and over: each sub-filter takes a few copies, so
	// the filter grows to its limit quickly.
	var full string
	for i := range 1000 {
		if err := rdb.Do(ctx, "CF.ADD", "c", "same").Err(); err != nil {
			full = err.Error()
			t.Logf("CF.ADD %d refused: %s", i+1, full)
			break
		}
	}
	if full != "Maximum expansions reached" {
		t.Fatalf("repeated CF.ADD of one item ended with %q, want Maximum expansions reached", full)
	}
	if m := info("c"); m["Number of filters"] != 20 {
		t.Errorf("a full growing filter has %d sub-filters, want 20", m["Number of filters"])
	}
}
