package bloomgate_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// TestMayContainManyMatchesSingle: batched answers equal one-at-a-time
// answers for every filter kind, every batch size around the internal chunk,
// long keys, and a gate that is not ready (all "maybe").
func TestMayContainManyMatchesSingle(t *testing.T) {
	present := keys("user", 3000)
	for _, norm := range []bloomgate.Normalizer{bloomgate.LowerTrim, bloomgate.Exact} {
		for _, nf := range []func(uint64, float64, uint64) (bloomgate.Filter, error){bloomgate.NewBloom, bloomgate.NewCuckoo, bloomgate.NewCounting} {
			testMayContainManyMatchesSingle(t, present, norm, nf)
		}
	}
}

func testMayContainManyMatchesSingle(t *testing.T, present []string, norm bloomgate.Normalizer, nf func(uint64, float64, uint64) (bloomgate.Filter, error)) {
	{
		g := newGate(t, bloomgate.Config{Source: memfeed.NewSource(present...), FPRate: 0.05, MaxKeyLen: 40, Normalizer: norm, NewFilter: nf})
		probe := func(ks []string) {
			t.Helper()
			bs := make([][]byte, len(ks))
			for i, k := range ks {
				bs[i] = []byte(k)
			}
			out1, out2 := make([]bool, len(ks)), make([]bool, len(ks))
			n1, n2 := g.MayContainStrings(ks, out1), g.MayContainMany(bs, out2)
			want := 0
			for i, k := range ks {
				single := g.MayContainString(k)
				if out1[i] != single || out2[i] != single {
					t.Fatalf("key %q: batched %v/%v, single %v", k, out1[i], out2[i], single)
				}
				if single {
					want++
				}
			}
			if n1 != want || n2 != want {
				t.Fatalf("counts %d/%d, want %d", n1, n2, want)
			}
		}
		rng := rand.New(rand.NewPCG(1, 2))
		var mixed []string
		for i := range 700 {
			switch rng.IntN(4) {
			case 0:
				mixed = append(mixed, present[rng.IntN(len(present))])
			case 1:
				mixed = append(mixed, strings.ToUpper(present[rng.IntN(len(present))])) // normalised
			case 2:
				mixed = append(mixed, strings.Repeat("x", 41)) // over MaxKeyLen
			default:
				mixed = append(mixed, fmt.Sprintf("nobody%d@example.com", i))
			}
		}
		probe(mixed) // before warm-up: all maybe
		if err := g.Warm(context.Background()); err != nil {
			t.Fatal(err)
		}
		sizes := []int{0, 1, 63, 64, 65, 127, 128, 129, 255, 256, 257, 500, 700}
		before := g.Stats()
		for _, n := range sizes {
			probe(mixed[:n])
		}
		after := g.Stats()
		// Every lookup is counted once, batched or single: the counters are
		// exact (counts.go). probe looks each key up three times, in two
		// batches and singly; keys over MaxKeyLen count as failing open.
		var answered, absent int
		for _, n := range sizes {
			for _, k := range mixed[:n] {
				if len(k) <= 40 {
					answered++
					if !g.MayContainString(k) {
						absent++
					}
				}
			}
		}
		if got, want := after.Lookups-before.Lookups, uint64(3*answered); got != want {
			t.Fatalf("%d lookups counted, want %d", got, want)
		}
		if got, want := after.Absent-before.Absent, uint64(3*absent); got != want {
			t.Fatalf("%d absent counted, want %d", got, want)
		}
	}
}

func TestMayContainManyAllocs(t *testing.T) {
	for _, norm := range []bloomgate.Normalizer{bloomgate.LowerTrim, bloomgate.Exact} {
		testMayContainManyAllocs(t, norm)
	}
}

func testMayContainManyAllocs(t *testing.T, norm bloomgate.Normalizer) {
	g := newGate(t, bloomgate.Config{Source: memfeed.NewSource(keys("user", 1000)...), Normalizer: norm})
	g.Warm(context.Background())
	ks := keys("USER", 200)
	bs := make([][]byte, len(ks))
	for i, k := range ks {
		bs[i] = []byte(k)
	}
	out := make([]bool, len(ks))
	if n := testing.AllocsPerRun(100, func() { g.MayContainStrings(ks, out) }); n != 0 {
		t.Errorf("MayContainStrings allocates %.1f times", n)
	}
	if n := testing.AllocsPerRun(100, func() { g.MayContainMany(bs, out) }); n != 0 {
		t.Errorf("MayContainMany allocates %.1f times", n)
	}
}
