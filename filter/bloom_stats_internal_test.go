package filter

import (
	"fmt"
	"testing"
)

// statsPerBlock is Stats' sums computed block by block, without the table
// of terms: the reference the table must match bit for bit.
func statsPerBlock(f *Bloom) (fp, distinct float64) {
	k := float64(f.k)
	for i := uint64(0); i < f.blocks; i++ {
		c := 0
		for _, w := range f.words[i*blockWords : (i+1)*blockWords] {
			for ; w != 0; w &= w - 1 {
				c++
			}
		}
		a, b := blockTerm(c, k)
		fp += a
		distinct += b
	}
	return fp / float64(f.blocks), distinct
}

// TestStatsTermsTable: a table large enough for Stats to look its terms up
// gives the estimates the per-block computation gives, empty, part full,
// full and overfilled, for several k.
func TestStatsTermsTable(t *testing.T) {
	for _, tc := range []struct {
		p        float64
		capacity int
	}{{0.1, 500_000}, {0.01, 250_000}, {0.0001, 120_000}} {
		p := tc.p
		f, err := NewBloom(BloomConfig{Capacity: uint64(tc.capacity), FPRate: p, Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		if f.blocks < blockTermsFrom {
			t.Fatalf("p %g: %d blocks, below the table's %d", p, f.blocks, blockTermsFrom)
		}
		added := 0
		for _, n := range []int{0, tc.capacity / 4, tc.capacity, 5 * tc.capacity} {
			for ; added < n; added++ {
				f.Add(fmt.Appendf(nil, "key%d", added))
			}
			st := f.Stats()
			fp, distinct := statsPerBlock(f)
			if st.EstimatedFPRate != fp || st.EstimatedDistinct != distinct {
				t.Errorf("p %g, %d keys: Stats %v / %v, per block %v / %v", p, n, st.EstimatedFPRate, st.EstimatedDistinct, fp, distinct)
			}
		}
	}
}

// BenchmarkBloomStats: Stats of a 10 M-key 1 % filter, half full.
func BenchmarkBloomStats(b *testing.B) {
	f, err := NewBloom(BloomConfig{Capacity: 10_000_000, FPRate: 0.01})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 5_000_000 {
		f.Add(fmt.Appendf(nil, "key%d", i))
	}
	b.SetBytes(int64(f.Bytes()))
	for b.Loop() {
		f.Stats()
	}
}
