package redisstream_test

import (
	"testing"

	"github.com/bloomgate/bloomgate/internal/fanouttest"
)

// BenchmarkLag reports commit-to-visible on an instance at ~1 k inserts/s
// from 16 writers, 10 s per iteration, one feeder, no WAIT: p50-ms and
// p99-ms from the insert's return, fanout-p50-ms and fanout-p99-ms from
// the feeder's receipt of the row (the fan-out's share), db-p50-ms and
// db-p99-ms from a transaction's commit time to the feeder's receipt (the
// database's share), held-p99-ms the part of the fan-out's share spent
// while the feeder's apply held the feed (see fanouttest.TimedFeed).
//
//	go test -run '^$' -bench 'BenchmarkLag$' -benchtime 1x ./fanout/redisstream/
func BenchmarkLag(b *testing.B) {
	set, _, _ := openSet(b)
	pg := fanouttest.NewPG(b, 1000)
	feed := &fanouttest.TimedFeed{Feed: pg.Feed(b)}
	runFeederOn(b, set, pg, feed, "A")
	g, _ := instance(b, set, pg)
	var r fanouttest.LagResult
	for b.Loop() {
		r = fanouttest.Lag(b, fanouttest.LagConfig{PG: pg, Instance: g, Feed: feed})
		if r.FalseNegatives > 0 {
			b.Fatalf("%d false negatives", r.FalseNegatives)
		}
	}
	b.Log(r)
	fanouttest.ReportLag(b, r)
}
