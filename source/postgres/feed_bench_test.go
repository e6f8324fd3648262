package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// BenchmarkFeedLag measures commit-to-delivery lag: the time from an
// INSERT's commit returning to the client until the feed hands its
// transaction to apply (an upper bound on the true lag), at a fixed rate of
// single-row transactions (BLOOMGATE_FEED_RATE per second, default 1000)
// for BLOOMGATE_FEED_SECONDS (default 5) per iteration.
//
//	go test ./source/postgres -run XXX -bench FeedLag -benchtime 1x
//	BLOOMGATE_FEED_RATE=10000 BLOOMGATE_FEED_WRITERS=64 go test ./source/postgres -run XXX -bench FeedLag -benchtime 1x
func BenchmarkFeedLag(b *testing.B) {
	rate, seconds := envInt(b, "BLOOMGATE_FEED_RATE", 1000), envInt(b, "BLOOMGATE_FEED_SECONDS", 5)
	fx := newFeedFixture(b, "")
	ctx := context.Background()
	f := fx.feed(b)
	p, err := f.Bootstrap(ctx, func([]byte) error { return nil })
	if err != nil {
		b.Fatal(err)
	}
	var mu sync.Mutex
	committed, delivered := map[string]time.Time{}, map[string]time.Time{}
	sctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- f.Stream(sctx, p, func(t changefeed.Txn) error {
			now := time.Now()
			mu.Lock()
			for _, c := range t.Changes {
				delivered[string(c.Key)] = now
			}
			mu.Unlock()
			return f.Confirm(sctx, t.End)
		})
	}()
	// Writers get a pool of their own, a connection each: single-row
	// commits wait for their WAL flush, so the rate needs many in flight
	// (group commit).
	writers := envInt(b, "BLOOMGATE_FEED_WRITERS", 8)
	pcfg, err := pgxpool.ParseConfig(fx.pool.Config().ConnString())
	if err != nil {
		b.Fatal(err)
	}
	pcfg.MaxConns = int32(writers)
	wpool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		b.Fatal(err)
	}
	defer wpool.Close()
	var sent int
	for b.Loop() {
		// Writers share the rate; each sends at its own fixed interval.
		interval := time.Duration(writers) * time.Second / time.Duration(rate)
		deadline := time.Now().Add(time.Duration(seconds) * time.Second)
		var wg sync.WaitGroup
		var smu sync.Mutex
		for w := range writers {
			wg.Go(func() {
				next := time.Now()
				for i := 0; time.Now().Before(deadline); i++ {
					if d := time.Until(next); d > 0 {
						time.Sleep(d)
					}
					next = next.Add(interval)
					key := fmt.Sprintf("lag-%d-%d-%d", w, i, time.Now().UnixNano())
					if _, err := wpool.Exec(ctx, "INSERT INTO "+fx.table+" (email) VALUES ($1)", key); err != nil {
						b.Error(err)
						return
					}
					now := time.Now()
					mu.Lock()
					committed[key] = now
					mu.Unlock()
					smu.Lock()
					sent++
					smu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	end := fx.walEnd(b)
	for {
		h := f.Health()
		if h.Delivered >= end {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	// A delivery may beat the client's view of its own commit: lag 0.
	var lags []time.Duration
	var early int
	for k, at := range committed {
		d, ok := delivered[k]
		if !ok {
			b.Fatalf("%s committed, never delivered", k)
		}
		if d.Before(at) {
			early++
		}
		lags = append(lags, max(0, d.Sub(at)))
	}
	slices.Sort(lags)
	q := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))].Microseconds()) / 1000 }
	b.ReportMetric(float64(sent)/b.Elapsed().Seconds(), "inserts/s")
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(q(1), "max-ms")
	b.Logf("%d inserts, all delivered (%d before the client saw its commit); lag p50 %.2f ms p99 %.2f ms max %.2f ms", sent, early, q(0.5), q(0.99), q(1))
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive integer", name, s)
	}
	return n
}

// receiveRun streams a feed into a consumer that counts inserted rows and
// confirms every transaction (as Gate.Follow does without snapshots), for
// measuring the feed's receive path: the replication messages' receipt,
// decoding and delivery.
type receiveRun struct {
	fx      *feedFixture
	f       *postgres.Feed
	rows    atomic.Int64
	target  atomic.Int64
	reached chan struct{}
	stop    func()
	batch   int
}

func startReceive(tb testing.TB) *receiveRun {
	tb.Helper()
	fx := newFeedFixture(tb, "")
	r := &receiveRun{fx: fx, f: fx.feed(tb), reached: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	p, err := r.f.Bootstrap(ctx, func([]byte) error { return nil })
	if err != nil {
		tb.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		done <- r.f.Stream(ctx, p, func(t changefeed.Txn) error {
			var n int64
			for _, c := range t.Changes {
				if c.Kind == changefeed.Insert && len(c.Key) > 0 {
					n++
				}
			}
			if n > 0 {
				// Signal once per batch: when this transaction reaches the target.
				now, target := r.rows.Add(n), r.target.Load()
				if now >= target && now-n < target {
					r.reached <- struct{}{}
				}
			}
			return r.f.Confirm(ctx, t.End)
		})
	}()
	r.stop = func() {
		cancel()
		if err := <-done; !errors.Is(err, context.Canceled) {
			tb.Errorf("Stream: %v", err)
		}
	}
	tb.Cleanup(r.stop)
	// Connected and past the bootstrap point before anything is measured.
	for deadline := time.Now().Add(time.Minute); r.f.Health().CaughtUp.IsZero(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("the feed never caught up: %+v", r.f.Health())
		}
	}
	return r
}

// receiveCost is what the process spent per row delivered.
type receiveCost struct {
	allocs, bytes, cpuNs float64
	gcs                  uint32
}

// measure inserts rows rows in transactions of perTxn rows, all made by
// one statement running on the server (so the test's own client allocates
// next to nothing), and returns what the whole process spent, in
// allocations, bytes and CPU time, per row until the feed delivered the
// last one.
func (r *receiveRun) measure(tb testing.TB, rows, perTxn int) receiveCost {
	tb.Helper()
	if rows%perTxn != 0 {
		tb.Fatalf("%d rows in transactions of %d", rows, perTxn)
	}
	r.batch++
	stmt := fmt.Sprintf(`DO $$ BEGIN FOR i IN 1..%d LOOP
		INSERT INTO %s (email) SELECT 'user' || i || '.' || g || '.%d@example.com' FROM generate_series(1, %d) g;
		COMMIT; END LOOP; END $$`, rows/perTxn, r.fx.table, r.batch, perTxn)
	r.target.Add(int64(rows))
	var m0, m1 runtime.MemStats
	var u0, u1 syscall.Rusage
	runtime.GC()
	runtime.ReadMemStats(&m0)
	syscall.Getrusage(syscall.RUSAGE_SELF, &u0)
	if _, err := r.fx.pool.Exec(context.Background(), stmt); err != nil {
		tb.Fatal(err)
	}
	select {
	case <-r.reached:
	case <-time.After(2 * time.Minute):
		tb.Fatalf("%d of %d rows delivered after 2 minutes", r.rows.Load(), r.target.Load())
	}
	syscall.Getrusage(syscall.RUSAGE_SELF, &u1)
	runtime.ReadMemStats(&m1)
	cpu := time.Duration(u1.Utime.Nano() + u1.Stime.Nano() - u0.Utime.Nano() - u0.Stime.Nano())
	n := float64(rows)
	return receiveCost{
		allocs: float64(m1.Mallocs-m0.Mallocs) / n,
		bytes:  float64(m1.TotalAlloc-m0.TotalAlloc) / n,
		cpuNs:  float64(cpu.Nanoseconds()) / n,
		gcs:    m1.NumGC - m0.NumGC,
	}
}

// BenchmarkFeedReceive measures the feed's receive path per replicated row:
// allocations, bytes allocated and the process's CPU time (user and
// system), for rows inserted in transactions of 1 and of 100 rows, each
// transaction confirmed. One iteration is BLOOMGATE_FEED_ROWS rows (default
// 20000).
//
//	go test ./source/postgres -run XXX -bench FeedReceive -benchtime 3x
func BenchmarkFeedReceive(b *testing.B) {
	rows := envInt(b, "BLOOMGATE_FEED_ROWS", 20000)
	for _, perTxn := range []int{1, 100} {
		b.Run(fmt.Sprintf("txn=%d", perTxn), func(b *testing.B) {
			r := startReceive(b)
			var sum receiveCost
			var n float64
			for b.Loop() {
				c := r.measure(b, rows, perTxn)
				sum.allocs += c.allocs
				sum.bytes += c.bytes
				sum.cpuNs += c.cpuNs
				n++
			}
			b.ReportMetric(sum.allocs/n, "allocs/row")
			b.ReportMetric(sum.bytes/n, "B/row")
			b.ReportMetric(sum.cpuNs/n, "cpu-ns/row")
		})
	}
}
