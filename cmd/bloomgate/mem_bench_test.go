package main

import (
	"context"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// BenchmarkServeFilterRSS: the resident memory of a durable `bloomgate
// serve` (appendfsync everysec) holding one Bloom filter reserved for
// BLOOMGATE_BENCH_KEYS items (default 10 M) at 1 %, filled with as many
// BF.ADDs of random items from a billion (4 clients, pipelines of 64, as
// bench/serve-mem.sh), two seconds after the last add. Reports VmRSS and its
// anonymous and file-backed parts (the binary's pages) in MB, the filter's
// bytes (BF.INFO SIZE), and VmRSS per filter byte. b.N is the number of
// servers filled (use -benchtime=1x).
func BenchmarkServeFilterRSS(b *testing.B) {
	bin := buildBinary(b)
	n := benchKeys(b)
	var rss, anon, file, size float64
	for range b.N {
		addr := freeAddr(b)
		srv := startServe(b, bin, "-resp", addr, "-http", "", "-data", b.TempDir(), "-appendfsync", "everysec")
		<-srv.ready
		ctx := context.Background()
		rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 4, Protocol: 2})
		if err := rdb.Do(ctx, "BF.RESERVE", "big", "0.01", n).Err(); err != nil {
			b.Fatal(err)
		}
		const clients, depth = 4, 64
		var wg sync.WaitGroup
		errs := make(chan error, clients)
		for c := range clients {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(c), 1))
				for left := n / clients; left > 0; left -= depth {
					p := rdb.Pipeline()
					for range min(left, depth) {
						p.Do(ctx, "BF.ADD", "big", rng.IntN(1_000_000_000))
					}
					if _, err := p.Exec(ctx); err != nil {
						errs <- err
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
		info, err := rdb.Do(ctx, "BF.INFO", "big", "SIZE").Int64Slice() // [size], as RedisBloom
		if err != nil || len(info) != 1 {
			b.Fatal(info, err)
		}
		rdb.Close()
		time.Sleep(2 * time.Second)
		st := procStatus(b, srv.cmd.Process.Pid)
		rss += st["VmRSS"]
		anon += st["RssAnon"]
		file += st["RssFile"]
		size += float64(info[0])
		srv.cmd.Process.Kill()
		srv.wait()
	}
	f := float64(b.N)
	b.ReportMetric(rss/f/1e6, "RSS-MB")
	b.ReportMetric(anon/f/1e6, "anon-MB")
	b.ReportMetric(file/f/1e6, "file-MB")
	b.ReportMetric(size/f/1e6, "filter-MB")
	b.ReportMetric(rss/size, "RSS/filter")
	b.ReportMetric(0, "ns/op")
}

// procStatus returns the kB fields of /proc/PID/status, in bytes.
func procStatus(b *testing.B, pid int) map[string]float64 {
	b.Helper()
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		b.Skipf("no /proc: %v", err)
	}
	out := map[string]float64{}
	for line := range strings.Lines(string(data)) {
		k, v, ok := strings.Cut(line, ":")
		if f := strings.Fields(v); ok && len(f) == 2 && f[1] == "kB" {
			if x, err := strconv.ParseFloat(f[0], 64); err == nil {
				out[k] = x * 1024
			}
		}
	}
	return out
}
