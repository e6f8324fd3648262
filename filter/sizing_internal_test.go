package filter

import (
	"math"
	"testing"
)

// exactBlockedRate is blockedRate computed from the exact distribution of
// occupied slots in a block (probe by probe), not from its mean and variance.
func exactBlockedRate(lambda float64, k, slots int) float64 {
	sd := math.Sqrt(lambda)
	hi := int(lambda+12*sd+16) + 1
	s := float64(slots)
	dist := make([]float64, slots+1) // dist[x]: P(x slots occupied)
	dist[0] = 1
	sum := 0.0
	for i := 0; i <= hi; i++ {
		if i > 0 {
			for range k {
				for x := slots; x >= 0; x-- {
					v := dist[x] * float64(x) / s
					if x > 0 {
						v += dist[x-1] * float64(slots-x+1) / s
					}
					dist[x] = v
				}
			}
		}
		lg, _ := math.Lgamma(float64(i + 1))
		pmf := math.Exp(-lambda + float64(i)*math.Log(lambda) - lg)
		e := 0.0
		for x, p := range dist {
			e += p * math.Pow(float64(x)/s, float64(k))
		}
		sum += pmf * e
	}
	return sum
}

// TestBlockedRateExact checks the sizing model against the exact occupancy
// distribution: a model without the variance term understates the rate.
func TestBlockedRateExact(t *testing.T) {
	for _, tc := range []struct {
		p     float64
		slots int
	}{
		{0.01, blockBits}, {0.001, blockBits}, {1e-6, blockBits},
		{0.01, 256}, {0.001, 256}, {1e-5, 256}, // Counting's blocks
	} {
		blocks, k, err := sizeBlocked(1_000_000, tc.p, tc.slots)
		if err != nil {
			t.Fatal(err)
		}
		lambda := 1e6 / float64(blocks)
		model, exact := blockedRate(lambda, k, tc.slots), exactBlockedRate(lambda, k, tc.slots)
		if math.Abs(model-exact)/exact > 0.003 {
			t.Errorf("p=%g slots=%d k=%d: model %.6g, exact %.6g", tc.p, tc.slots, k, model, exact)
		}
		if exact > tc.p*1.003 {
			t.Errorf("p=%g slots=%d: sized filter's exact rate %.6g exceeds the target", tc.p, tc.slots, exact)
		}
	}
}

// TestSizeBlockedSearch checks the pruned search against trying every k in
// full.
func TestSizeBlockedSearch(t *testing.T) {
	exhaustive := func(n uint64, p float64, slots int) (uint64, int) {
		lo := uint64(math.Max(1, math.Floor(ClassicBits(n, p)/float64(slots))))
		var blocks uint64
		var k int
		for kk := 1; kk <= maxK; kk++ {
			for b := lo; float64(b) <= 4*float64(lo)+64; b++ {
				if blockedRate(float64(n)/float64(b), kk, slots) <= p {
					if blocks == 0 || b < blocks {
						blocks, k = b, kk
					}
					break
				}
			}
		}
		return blocks, k
	}
	for _, n := range []uint64{1, 7, 100, 1000, 12345} {
		for _, p := range []float64{0.5, 0.1, 0.01, 0.001, 1e-4} {
			for _, slots := range []int{blockBits, 256} {
				blocks, k, err := sizeBlocked(n, p, slots)
				wb, wk := exhaustive(n, p, slots)
				if err != nil || blocks != wb || k != wk {
					t.Errorf("n=%d p=%g slots=%d: %d blocks k=%d (%v), exhaustive %d blocks k=%d", n, p, slots, blocks, k, err, wb, wk)
				}
			}
		}
	}
}

// TestBlockedRateExtremes: absurd geometry (as a decoder may meet) answers
// at once.
func TestBlockedRateExtremes(t *testing.T) {
	for _, tc := range []struct {
		lambda float64
		want   float64
	}{
		{0, 0}, {math.NaN(), 0}, {-1, 0}, {math.Inf(1), 1}, {1e18, 1}, {64 * blockBits * 1.01, 1},
	} {
		if got := blockedRate(tc.lambda, 7, blockBits); got != tc.want {
			t.Errorf("blockedRate(%g) = %g, want %g", tc.lambda, got, tc.want)
		}
	}
	if got := blockedRate(64*blockBits, 1, blockBits); math.Abs(got-1) > 1e-9 {
		t.Errorf("rate at the cut-off = %g, want 1", got)
	}
	s := Sizing{Capacity: 1 << 62, FPRate: 0.01, Blocks: 1, K: 7}
	if got := s.FPRateAt(1 << 62); got != 1 {
		t.Errorf("FPRateAt of an overfull filter = %g", got)
	}
}

// TestClassicFPRate: a classic filter sized by ClassicBits and ClassicK has
// about the target rate (the formulas agree with each other).
func TestClassicFPRate(t *testing.T) {
	for _, p := range []float64{0.1, 0.01, 0.001, 1e-6} {
		n := uint64(1_000_000)
		got := classicFPRate(ClassicBits(n, p), ClassicK(p), n)
		if got < p/1.3 || got > p*1.3 {
			t.Errorf("p=%g: classicFPRate at ClassicBits, ClassicK = %g", p, got)
		}
	}
}
