package resp

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/serve"
)

// TestGoRedis drives the server through go-redis's typed BF/CF methods, in
// RESP3 (go-redis's default, after HELLO 3) and RESP2.
func TestGoRedis(t *testing.T) {
	for _, proto := range []int{3, 2} {
		t.Run(fmt.Sprint("RESP", proto), func(t *testing.T) {
			t.Parallel()
			addr, _ := startServer(t, Config{Password: "secret"}, serve.Config{})
			rdb := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto, Password: "secret"})
			defer rdb.Close()
			goRedisBloom(t, rdb)
			goRedisCuckoo(t, rdb)
			goRedisKeyspace(t, rdb)
		})
	}
}

// must(f()).(t) returns f's value and fails t on its error.
func must[T any](v T, err error) func(*testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func goRedisBloom(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	if ok := must(rdb.BFAdd(ctx, "bf", "a").Result())(t); !ok {
		t.Error("BFAdd new item = false")
	}
	if ok := must(rdb.BFAdd(ctx, "bf", "a").Result())(t); ok {
		t.Error("BFAdd repeated item = true")
	}
	info := must(rdb.BFInfo(ctx, "bf").Result())(t)
	if info != (redis.BFInfo{Capacity: 100, Size: info.Size, Filters: 1, ItemsInserted: 1, ExpansionRate: 2}) || info.Size == 0 {
		t.Errorf("BFInfo = %+v", info)
	}
	if got := must(rdb.BFInfoCapacity(ctx, "bf").Result())(t); got.Capacity != 100 {
		t.Errorf("BFInfoCapacity = %+v", got)
	}
	added := must(rdb.BFMAdd(ctx, "bf", "b", "c", "a").Result())(t)
	if fmt.Sprint(added) != "[true true false]" {
		t.Errorf("BFMAdd = %v", added)
	}
	ex := must(rdb.BFMExists(ctx, "bf", "a", "b", "zzz").Result())(t)
	if fmt.Sprint(ex) != "[true true false]" {
		t.Errorf("BFMExists = %v", ex)
	}
	if n := must(rdb.BFCard(ctx, "bf").Result())(t); n != 3 {
		t.Errorf("BFCard = %d", n)
	}
	must(rdb.BFReserve(ctx, "res", 0.001, 1000).Result())(t)
	if err := rdb.BFReserve(ctx, "res", 0.001, 1000).Err(); err == nil || err.Error() != "ERR item exists" {
		t.Errorf("BFReserve twice: %v", err)
	}
	must(rdb.BFReserveNonScaling(ctx, "ns", 0.01, 2).Result())(t)
	ins, err := rdb.BFInsert(ctx, "ns", &redis.BFInsertOptions{NoCreate: true}, "x", "y", "z").Result()
	if err == nil || fmt.Sprint(ins) != "[]" && err.Error() != "ERR non scaling filter is full" {
		t.Errorf("BFInsert into a full non-scaling filter: %v, %v", ins, err)
	}
	if err := rdb.BFInsert(ctx, "missing", &redis.BFInsertOptions{NoCreate: true}, "x").Err(); err == nil || err.Error() != "ERR not found" {
		t.Errorf("BFInsert NOCREATE on a missing key: %v", err)
	}
	ins = must(rdb.BFInsert(ctx, "ins", &redis.BFInsertOptions{Capacity: 1000, Error: 0.001}, "p", "q").Result())(t)
	if fmt.Sprint(ins) != "[true true]" {
		t.Errorf("BFInsert = %v", ins)
	}
	// SCANDUMP into LOADCHUNK.
	var chunks []redis.ScanDump
	for it := int64(0); ; {
		d := must(rdb.BFScanDump(ctx, "bf", it).Result())(t)
		if d.Iter == 0 {
			break
		}
		chunks = append(chunks, d)
		it = d.Iter
	}
	for _, c := range chunks {
		must(rdb.BFLoadChunk(ctx, "bf-copy", c.Iter, c.Data).Result())(t)
	}
	ex = must(rdb.BFMExists(ctx, "bf-copy", "a", "b", "c").Result())(t)
	if fmt.Sprint(ex) != "[true true true]" {
		t.Errorf("restored filter: %v", ex)
	}
}

func goRedisCuckoo(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	must(rdb.CFReserveWithArgs(ctx, "cf", &redis.CFReserveOptions{Capacity: 9, Expansion: 0, BucketSize: 2}).Result())(t)
	for i := range 5 {
		if !must(rdb.CFAdd(ctx, "cf", fmt.Sprint("x", i)).Result())(t) {
			t.Error("CFAdd = false")
		}
	}
	if !must(rdb.CFDel(ctx, "cf", "x0").Result())(t) {
		t.Error("CFDel = false")
	}
	info := must(rdb.CFInfo(ctx, "cf").Result())(t)
	if info.NumItemsInserted != 4 || info.NumItemsDeleted != 1 || info.BucketSize != 2 || info.NumFilters != 1 || info.MaxIteration != 20 {
		t.Errorf("CFInfo = %+v", info)
	}
	if must(rdb.CFAddNX(ctx, "cf", "x1").Result())(t) {
		t.Error("CFAddNX of a present item = true")
	}
	if n := must(rdb.CFCount(ctx, "cf", "x1").Result())(t); n != 1 {
		t.Errorf("CFCount = %d", n)
	}
	if !must(rdb.CFExists(ctx, "cf", "x2").Result())(t) {
		t.Error("CFExists = false")
	}
	ex := must(rdb.CFMExists(ctx, "cf", "x1", "x2", "nope").Result())(t)
	if fmt.Sprint(ex) != "[true true false]" {
		t.Errorf("CFMExists = %v", ex)
	}
	ins := must(rdb.CFInsert(ctx, "cf2", &redis.CFInsertOptions{Capacity: 1000}, "a", "b").Result())(t)
	if fmt.Sprint(ins) != "[true true]" {
		t.Errorf("CFInsert = %v", ins)
	}
	nx := must(rdb.CFInsertNX(ctx, "cf2", nil, "a", "c").Result())(t)
	if fmt.Sprint(nx) != "[0 1]" {
		t.Errorf("CFInsertNX = %v", nx)
	}
	if err := rdb.CFDel(ctx, "nokey", "a").Err(); err == nil || err.Error() != "Not found" {
		t.Errorf("CFDel on a missing key: %v", err)
	}
	var chunks []redis.ScanDump
	for it := int64(0); ; {
		d, err := rdb.CFScanDump(ctx, "cf2", it).Result()
		if err != nil && err != redis.Nil {
			t.Fatal(err)
		}
		if d.Iter == 0 {
			break
		}
		chunks = append(chunks, d)
		it = d.Iter
	}
	for _, c := range chunks {
		must(rdb.CFLoadChunk(ctx, "cf2-copy", c.Iter, c.Data).Result())(t)
	}
	if n := must(rdb.CFCount(ctx, "cf2-copy", "a").Result())(t); n != 1 {
		t.Errorf("restored cuckoo filter: count %d", n)
	}
}

func goRedisKeyspace(t *testing.T, rdb *redis.Client) {
	ctx := context.Background()
	if got := must(rdb.Type(ctx, "bf").Result())(t); got != "MBbloom--" {
		t.Errorf("TYPE bf = %q", got)
	}
	if got := must(rdb.Type(ctx, "cf").Result())(t); got != "MBbloomCF" {
		t.Errorf("TYPE cf = %q", got)
	}
	keys, cursor := must2(t)(rdb.Scan(ctx, 0, "bf*", 100).Result())
	if fmt.Sprint(keys) != "[bf bf-copy]" || cursor != 0 {
		t.Errorf("SCAN = %v, %d", keys, cursor)
	}
	if n := must(rdb.Exists(ctx, "bf", "cf", "nope").Result())(t); n != 2 {
		t.Errorf("EXISTS = %d", n)
	}
	if n := must(rdb.Del(ctx, "bf", "nope").Result())(t); n != 1 {
		t.Errorf("DEL = %d", n)
	}
	if n := must(rdb.DBSize(ctx).Result())(t); n != 7 {
		t.Errorf("DBSIZE = %d", n)
	}
	if s := must(rdb.Info(ctx).Result())(t); s == "" {
		t.Error("INFO is empty")
	}
	if err := rdb.Do(ctx, "NOSUCH").Err(); err == nil || err.Error() != "ERR unknown command 'NOSUCH', with args beginning with: " {
		t.Errorf("unknown command: %v", err)
	}
}

func must2(t *testing.T) func([]string, uint64, error) ([]string, uint64) {
	return func(k []string, c uint64, err error) ([]string, uint64) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return k, c
	}
}
