package bloomgate_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

type sliceSource [][]byte

func (s sliceSource) Scan(ctx context.Context, fn func([]byte) error) error {
	for _, k := range s {
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

func (s sliceSource) Estimate(context.Context) (int64, error) { return int64(len(s)), nil }

// BenchmarkMayContain compares a lookup through the gate with a lookup on the
// same filter directly: the gate's cost is the state check, normalisation
// and a striped counter.
//
// The -batch rows look keys up 100 at a time (MayContainMany); ns/op is still
// per key.
//
//	go test -run XXX -bench MayContain -count 6 . | benchstat -col /via -
func BenchmarkMayContain(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		present := filtertest.Emails(n, 1)
		absent := filtertest.Emails(1<<16, 2)
		var bloom *filter.Bloom
		g, err := bloomgate.New(bloomgate.Config{Source: sliceSource(present), Capacity: uint64(n), FPRate: 0.001,
			NewFilter: func(n uint64, p float64, seed uint64) (bloomgate.Filter, error) {
				var err error
				bloom, err = filter.NewBloom(filter.BloomConfig{Capacity: n, FPRate: p, Seed: seed})
				return bloom, err
			}})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Warm(context.Background()); err != nil {
			b.Fatal(err)
		}
		for _, tc := range []struct {
			name string
			keys [][]byte
		}{{"absent", absent}, {"present", present[:1<<16]}} {
			mask := len(tc.keys) - 1
			b.Run(fmt.Sprintf("n=%d/%s/via=filter", n, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					bloom.MayContain(tc.keys[i&mask])
					i++
				}
			})
			b.Run(fmt.Sprintf("n=%d/%s/via=gate", n, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					g.MayContain(tc.keys[i&mask])
					i++
				}
			})
			// Batches of 100 keys; ns/op is per key.
			out := make([]bool, 100)
			b.Run(fmt.Sprintf("n=%d/%s/via=filter-batch", n, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i%100 == 0 {
						j := i & mask &^ 127
						bloom.MayContainMany(tc.keys[j:j+100], out)
					}
					i++
				}
			})
			b.Run(fmt.Sprintf("n=%d/%s/via=gate-batch", n, tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				for b.Loop() {
					if i%100 == 0 {
						j := i & mask &^ 127
						g.MayContainMany(tc.keys[j:j+100], out)
					}
					i++
				}
			})
		}
		g.Close()
	}
}

// BenchmarkAddSustained measures Add at a steady rate of adds per second on a
// simulated clock, with the journal of recent adds already holding one
// RebuildOverlap (a minute) of them, as in a long-running service.
//
//	go test -run XXX -bench AddSustained -count 6 .
func BenchmarkAddSustained(b *testing.B) {
	for _, rate := range []int{1_000, 10_000, 100_000} {
		b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
			now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
			step := time.Second / time.Duration(rate)
			g, err := bloomgate.New(bloomgate.Config{Source: sliceSource(nil), Capacity: 10_000_000, Now: func() time.Time { return now }})
			if err != nil {
				b.Fatal(err)
			}
			defer g.Close()
			if err := g.Warm(context.Background()); err != nil {
				b.Fatal(err)
			}
			keys := filtertest.Emails(1<<16, 3)
			mask := len(keys) - 1
			for i := range 60 * rate { // one overlap's worth
				now = now.Add(step)
				g.Add(keys[i&mask])
			}
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				now = now.Add(step)
				if err := g.Add(keys[i&mask]); err != nil {
					b.Fatal(err)
				}
				i++
			}
			b.ReportMetric(float64(g.Stats().JournalAdds), "journal-adds")
		})
	}
}
