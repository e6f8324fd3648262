package fanouttest

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TimedFeed passes a changefeed.Feed through and notes when each
// transaction reached the feeder, so that Lag can split commit-to-visible
// into the database's share (commit to the feeder's receipt) and the
// fan-out's (receipt to visible on an instance).
//
// The receipt is not simply when Stream called apply with the transaction:
// a Feed delivers one transaction at a time, so while the feeder's apply
// holds it (waiting for room to queue, say) the next transactions wait in
// the feed, committed and sent, and their wait is the feeder's doing. A
// transaction's receipt is therefore its delivery less the time the feed
// spent inside apply after its commit: the database's share is what the
// feed took by itself, and the time the feeder held it is the fan-out's
// (Held reports it apart).
type TimedFeed struct {
	changefeed.Feed
	mu   sync.Mutex
	ends []changefeed.Position // increasing
	at   []time.Time           // the receipt of the transaction ending at ends[i]
	// spans are the calls of apply so far, in order: [spans[i].in,
	// spans[i].out), and inside[i] the time spent in spans[:i].
	spans  []span
	inside []time.Duration
	// lag is, per delivered transaction, its receipt less its commit time
	// by the database's clock (the same host's in these tests): the
	// database's own delivery, before anything of the fan-out; held is the
	// time the feed spent inside apply after that commit, before it
	// delivered the transaction.
	lag, held []time.Duration
}

type span struct{ in, out time.Time }

// Stream is the Feed's Stream, noting each delivery and each call of
// apply.
func (f *TimedFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	return f.Feed.Stream(ctx, from, func(t changefeed.Txn) error {
		in := time.Now()
		f.mu.Lock()
		var held time.Duration
		if !t.Time.IsZero() {
			held = f.insideBy(in) - f.insideBy(t.Time)
		}
		rec := in.Add(-held)
		if n := len(f.ends); n == 0 || t.End > f.ends[n-1] {
			f.ends, f.at = append(f.ends, t.End), append(f.at, rec)
		}
		if len(t.Changes) > 0 && !t.Time.IsZero() {
			f.lag, f.held = append(f.lag, rec.Sub(t.Time)), append(f.held, held)
		}
		f.mu.Unlock()
		err := apply(t)
		out := time.Now()
		f.mu.Lock()
		if len(f.inside) == 0 {
			f.inside = append(f.inside, 0)
		}
		f.spans = append(f.spans, span{in, out})
		f.inside = append(f.inside, f.inside[len(f.inside)-1]+out.Sub(in))
		f.mu.Unlock()
		return err
	})
}

// insideBy returns the time the feed spent inside apply before at. f.mu is
// held.
func (f *TimedFeed) insideBy(at time.Time) time.Duration {
	i := sort.Search(len(f.spans), func(i int) bool { return f.spans[i].out.After(at) })
	if i == len(f.spans) {
		if i == 0 {
			return 0
		}
		return f.inside[i]
	}
	d := f.inside[i]
	if s := f.spans[i]; s.in.Before(at) {
		d += at.Sub(s.in)
	}
	return d
}

// received returns when the feeder received the first transaction ending
// at or after pos, the one that makes pos visible.
func (f *TimedFeed) received(pos changefeed.Position) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i := sort.Search(len(f.ends), func(i int) bool { return f.ends[i] >= pos })
	if i == len(f.ends) {
		return time.Time{}, false
	}
	return f.at[i], true
}

// LagConfig configures Lag.
type LagConfig struct {
	// PG is the table written to. Required.
	PG *PG
	// Instance is the gate that follows the set. Required.
	Instance *bloomgate.Gate
	// Feed, if set, is the feeder's Feed: the fan-out's share is measured.
	Feed *TimedFeed
	// Rate is the inserts per second attempted, from Writers writers, for
	// Duration. Defaults: 1000/s, 16 writers, 10 s.
	Rate     int
	Writers  int
	Duration time.Duration
}

// LagResult is what Lag measured: sorted durations.
type LagResult struct {
	Rows     int             // rows committed
	Rate     float64         // achieved inserts per second
	Commit   []time.Duration // commit (the insert returned) to visible on the instance
	Fanout   []time.Duration // the feeder's receipt of the row to visible (nil without Feed)
	Database []time.Duration // a transaction's commit time (the database's clock) to the feeder's receipt (nil without Feed)
	// Held is, per transaction, the part of the fan-out's share spent
	// before the feed delivered it: the time the feed spent inside the
	// feeder's apply after its commit (nil without Feed).
	Held           []time.Duration
	FalseNegatives int
}

// Quantile returns the q-quantile of sorted durations d (0 when empty).
func Quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	return d[min(int(q*float64(len(d))), len(d)-1)]
}

func (r LagResult) String() string {
	s := fmt.Sprintf("%d rows (%.0f/s): commit-to-visible p50 %v p99 %v max %v", r.Rows, r.Rate,
		Quantile(r.Commit, 0.5).Round(10*time.Microsecond), Quantile(r.Commit, 0.99).Round(10*time.Microsecond),
		Quantile(r.Commit, 1).Round(10*time.Microsecond))
	if r.Fanout != nil {
		s += fmt.Sprintf("; feeder's receipt to visible p50 %v p99 %v max %v",
			Quantile(r.Fanout, 0.5).Round(10*time.Microsecond), Quantile(r.Fanout, 0.99).Round(10*time.Microsecond),
			Quantile(r.Fanout, 1).Round(10*time.Microsecond))
	}
	if r.Database != nil {
		s += fmt.Sprintf("; database commit to the feeder's receipt p50 %v p99 %v max %v",
			Quantile(r.Database, 0.5).Round(10*time.Microsecond), Quantile(r.Database, 0.99).Round(10*time.Microsecond),
			Quantile(r.Database, 1).Round(10*time.Microsecond))
	}
	if r.Held != nil {
		s += fmt.Sprintf("; held in the feeder's apply before delivery p50 %v p99 %v max %v",
			Quantile(r.Held, 0.5).Round(10*time.Microsecond), Quantile(r.Held, 0.99).Round(10*time.Microsecond),
			Quantile(r.Held, 1).Round(10*time.Microsecond))
	}
	return s + fmt.Sprintf("; %d false negatives", r.FalseNegatives)
}

// Lag inserts rows one per transaction at cfg.Rate and measures how long
// each takes to become visible on cfg.Instance: its Position reaching the
// WAL position read after the commit. It waits until every row is
// visible, then looks every row up (a false negative is counted, not
// fatal: the caller decides).
func Lag(t testing.TB, cfg LagConfig) LagResult {
	t.Helper()
	if cfg.Rate <= 0 {
		cfg.Rate = 1000
	}
	if cfg.Writers <= 0 {
		cfg.Writers = 16
	}
	if cfg.Duration <= 0 {
		cfg.Duration = 10 * time.Second
	}
	type row struct {
		key   string
		token changefeed.Position
		at    time.Time
	}
	var mu sync.Mutex
	var rows []row
	if cfg.Feed != nil {
		cfg.Feed.mu.Lock()
		cfg.Feed.lag, cfg.Feed.held = cfg.Feed.lag[:0], cfg.Feed.held[:0] // this run's transactions only
		cfg.Feed.mu.Unlock()
	}
	ctx, stop := context.WithTimeout(context.Background(), cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for w := range cfg.Writers {
		wg.Go(func() {
			tick := time.NewTicker(time.Second * time.Duration(cfg.Writers) / time.Duration(cfg.Rate))
			defer tick.Stop()
			for n := 0; ctx.Err() == nil; n++ {
				select {
				case <-tick.C:
				case <-ctx.Done():
					return
				}
				key := fmt.Sprintf("w%d-%d-%d@x", w, n, time.Now().UnixNano())
				tok, err := cfg.PG.Insert(ctx, key)
				if err != nil {
					continue
				}
				mu.Lock()
				rows = append(rows, row{key, tok, time.Now()})
				mu.Unlock()
			}
		})
	}
	var res LagResult
	var pending []row
	next := 0
	poll := func() {
		pos := cfg.Instance.Position()
		now := time.Now()
		mu.Lock()
		pending = append(pending, rows[next:]...)
		next = len(rows)
		mu.Unlock()
		kept := pending[:0]
		for _, r := range pending {
			if r.token > pos {
				kept = append(kept, r)
				continue
			}
			res.Commit = append(res.Commit, now.Sub(r.at))
			if cfg.Feed != nil {
				if at, ok := cfg.Feed.received(r.token); ok {
					res.Fanout = append(res.Fanout, max(now.Sub(at), 0))
				}
			}
		}
		pending = kept
	}
	for ctx.Err() == nil {
		poll()
		time.Sleep(500 * time.Microsecond)
	}
	wg.Wait()
	testsvc.Eventually(t, time.Minute, func() bool { poll(); return len(pending) == 0 }, "the instance did not apply every row")
	for _, r := range rows {
		if !cfg.Instance.MayContain([]byte(r.key)) {
			res.FalseNegatives++
		}
	}
	res.Rows = len(rows)
	res.Rate = float64(len(rows)) / cfg.Duration.Seconds()
	if cfg.Feed != nil {
		cfg.Feed.mu.Lock()
		res.Database, res.Held = slices.Clone(cfg.Feed.lag), slices.Clone(cfg.Feed.held)
		cfg.Feed.mu.Unlock()
		slices.Sort(res.Database)
		slices.Sort(res.Held)
	}
	slices.Sort(res.Commit)
	slices.Sort(res.Fanout)
	return res
}

// ReportLag reports r's quantiles on b: commit-to-visible and, when
// measured, the fan-out's share, in milliseconds.
func ReportLag(b *testing.B, r LagResult) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
	b.ReportMetric(ms(Quantile(r.Commit, 0.5)), "p50-ms")
	b.ReportMetric(ms(Quantile(r.Commit, 0.99)), "p99-ms")
	if r.Fanout != nil {
		b.ReportMetric(ms(Quantile(r.Fanout, 0.5)), "fanout-p50-ms")
		b.ReportMetric(ms(Quantile(r.Fanout, 0.99)), "fanout-p99-ms")
	}
	if r.Database != nil {
		b.ReportMetric(ms(Quantile(r.Database, 0.5)), "db-p50-ms")
		b.ReportMetric(ms(Quantile(r.Database, 0.99)), "db-p99-ms")
	}
	if r.Held != nil {
		b.ReportMetric(ms(Quantile(r.Held, 0.99)), "held-p99-ms")
	}
	b.ReportMetric(r.Rate, "inserts/s")
	b.ReportMetric(0, "ns/op")
}
