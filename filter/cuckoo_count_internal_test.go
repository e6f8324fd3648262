package filter

import (
	"math/rand/v2"
	"testing"
)

// TestCuckooCountUsed: the decode's count of non-empty slots agrees with
// reading them one at a time, for every bucket size and fingerprint width,
// across word boundaries and at every fill.
func TestCuckooCountUsed(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, b := range []uint64{2, 4, 8} {
		for f := uint64(cuckooMinFPBits); f <= cuckooMaxFPBits; f++ {
			for _, fill := range []float64{0, 0.3, 0.95, 1} {
				g := cuckooGeom{buckets: 67, b: b, f: f}
				tb := newCuckooTable(g, 100, make([]uint64, g.words()))
				var want uint64
				for j := range g.buckets * g.b {
					fp := uint64(0)
					if r.Float64() < fill {
						fp = 1 + r.Uint64N(tb.mask)
						if r.IntN(4) == 0 {
							fp = tb.mask // all ones, and a single top bit
						} else if r.IntN(4) == 0 {
							fp = 1 << (f - 1)
						}
					}
					tb.setSlot(j, fp)
					if fp != 0 {
						want++
					}
				}
				if got := tb.countUsed(); got != want {
					t.Errorf("b=%d f=%d fill=%v: countUsed %d, want %d", b, f, fill, got, want)
				}
			}
		}
	}
}
