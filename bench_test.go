package bloomgate_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/cputime"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// sliceSource streams the benchmark's keys as they are: unlike
// internal/memfeed's Source it holds no map beside them, which at 10 M keys
// would double the benchmark's memory.
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
// and its counters. n=100k fits the CPU's L2 cache (in cache); at n=10M the
// filter (21 MB) and the 1 M keys cycled through are far larger than it.
//
// Besides wall time (ns/op) each row reports the thread's CPU time per
// lookup (cpu-ns/op, see internal/cputime), which on a shared machine leaves
// out the time spent waiting for a core.
//
// The -batch rows look keys up 128 at a time (MayContainMany); ns/op is still
// per key.
//
//	go test -run '^$' -bench MayContain -count 6 . | tee gate.txt
//	benchstat -col /via gate.txt
func BenchmarkMayContain(b *testing.B) {
	absent := benchEmails(1<<20, 2)
	for _, n := range []int{100_000, 10_000_000} {
		present := benchEmails(n, 1)
		g, bloom := benchGate(b, present)
		for _, tc := range []struct {
			name string
			keys [][]byte
		}{{"absent", absent}, {"present", present[:min(n, 1<<20)&^1023]}} {
			keys := tc.keys
			next := func(i int) int {
				if i++; i == len(keys) {
					return 0
				}
				return i
			}
			b.Run(fmt.Sprintf("n=%s/%s/via=filter", fmtN(n), tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				t := cputime.Start(b)
				for b.Loop() {
					bloom.MayContain(keys[i])
					i = next(i)
				}
				t.Stop()
			})
			b.Run(fmt.Sprintf("n=%s/%s/via=gate", fmtN(n), tc.name), func(b *testing.B) {
				b.ReportAllocs()
				i := 0
				t := cputime.Start(b)
				for b.Loop() {
					g.MayContain(keys[i])
					i = next(i)
				}
				t.Stop()
			})
			// Batches of 128 keys (len(keys) is a multiple); ns/op is per key.
			out := make([]bool, 128)
			batch := func(b *testing.B, fn func([][]byte, []bool) int) {
				b.ReportAllocs()
				i := 0
				t := cputime.Start(b)
				for b.Loop() {
					if i%128 == 0 {
						fn(keys[i:i+128], out)
					}
					if i++; i == len(keys) {
						i = 0
					}
				}
				t.Stop()
			}
			b.Run(fmt.Sprintf("n=%s/%s/via=filter-batch", fmtN(n), tc.name), func(b *testing.B) { batch(b, bloom.MayContainMany) })
			b.Run(fmt.Sprintf("n=%s/%s/via=gate-batch", fmtN(n), tc.name), func(b *testing.B) { batch(b, g.MayContainMany) })
		}
	}
}

// Fixtures shared by every -count round of the benchmarks, built once.
var benchFixtures struct {
	sync.Mutex
	keys  map[[2]int][][]byte
	gates map[int]*benchGateFixture
}

type benchGateFixture struct {
	g     *bloomgate.Gate
	bloom *filter.Bloom
}

func benchEmails(n, ns int) [][]byte {
	benchFixtures.Lock()
	defer benchFixtures.Unlock()
	if benchFixtures.keys == nil {
		benchFixtures.keys = map[[2]int][][]byte{}
	}
	k, ok := benchFixtures.keys[[2]int{n, ns}]
	if !ok {
		k = filtertest.Emails(n, uint64(ns))
		benchFixtures.keys[[2]int{n, ns}] = k
	}
	return k
}

// benchGate returns a warmed gate over present, at FPRate 0.1 %, and its
// Bloom filter. It is never closed: later rounds reuse it.
func benchGate(b *testing.B, present [][]byte) (*bloomgate.Gate, *filter.Bloom) {
	benchFixtures.Lock()
	defer benchFixtures.Unlock()
	if benchFixtures.gates == nil {
		benchFixtures.gates = map[int]*benchGateFixture{}
	}
	if fx, ok := benchFixtures.gates[len(present)]; ok {
		return fx.g, fx.bloom
	}
	var bloom *filter.Bloom
	g, err := bloomgate.New(bloomgate.Config{Source: sliceSource(present), Capacity: uint64(len(present)), FPRate: 0.001,
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
	benchFixtures.gates[len(present)] = &benchGateFixture{g, bloom}
	return g, bloom
}

func fmtN(n int) string {
	switch {
	case n%1_000_000 == 0:
		return fmt.Sprintf("%dM", n/1_000_000)
	case n%1000 == 0:
		return fmt.Sprintf("%dk", n/1000)
	}
	return fmt.Sprint(n)
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
