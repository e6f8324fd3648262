package postgres_test

import (
	"context"
	"fmt"
	"github.com/jackc/pgx/v5/pgxpool"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
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
