package filter

import (
	"fmt"
	"math/rand/v2"
	"testing"
)

// refMayContainHash is the probe written the plain way, without atomics:
// the reference that MayContainHash and the branch-free batch probes
// (probeAll in assembly, with and without AVX-512, and its portable twin)
// must agree with.
func refMayContainHash(f *Bloom, h uint64) bool {
	b := f.block(h)
	g := h
	for i := uint32(0); i < f.k; i++ {
		g *= probeMul
		pos := g >> 55
		if b[pos/64]&(1<<(pos%64)) == 0 {
			return false
		}
	}
	return true
}

// TestProbeAllMatches checks every probe against refMayContainHash for every
// K a filter can have (1 to maxK), on tables whose words are random at
// densities from sparse to full, so that answers are mixed, and on batches
// of every length up to 70 (the assembly's loops have no tail to get wrong,
// but the callers slice hashes into groups).
func TestProbeAllMatches(t *testing.T) {
	r := rand.New(rand.NewPCG(19, 7))
	for k := 1; k <= maxK; k++ {
		present, absent := 0, 0 // over the densities: both answers must occur
		for _, density := range []float64{0.5, 0.8, 0.95, 1} {
			t.Run(fmt.Sprintf("k=%d/density=%g", k, density), func(t *testing.T) {
				f := newBloom(Sizing{Capacity: 1000, FPRate: 0.01, Blocks: 67, K: k}, r.Uint64())
				for i := range f.words {
					for bit := range 64 {
						if r.Float64() < density {
							f.words[i] |= 1 << bit
						}
					}
				}
				hs := make([]uint64, 2000)
				want := make([]bool, len(hs))
				wantN := 0
				for i := range hs {
					hs[i] = r.Uint64()
					want[i] = refMayContainHash(f, hs[i])
					if want[i] {
						wantN++
					}
					if f.MayContainHash(hs[i]) != want[i] {
						t.Fatalf("MayContainHash(%#x) = %v, reference says %v", hs[i], !want[i], want[i])
					}
				}
				present, absent = present+wantN, absent+len(hs)-wantN
				saved := useAVX512
				defer func() { useAVX512 = saved }()
				for _, avx := range []bool{false, true} {
					useAVX512 = avx && saved
					for _, size := range []int{1, 2, 7, 8, 9, 31, 32, 33, 70, len(hs)} {
						out := make([]bool, size+1)
						out[size] = true
						n := f.probeAll(hs[:size], out)
						m := 0
						for i := range size {
							if out[i] != want[i] {
								t.Fatalf("avx %v: probeAll: out[%d] = %v for %#x, reference says %v", useAVX512, i, out[i], hs[i], want[i])
							}
							if want[i] {
								m++
							}
						}
						if n != m || !out[size] {
							t.Fatalf("avx %v: probeAll(%d hashes) = %d, want %d (or wrote past the end)", useAVX512, size, n, m)
						}
					}
				}
			})
		}
		if present == 0 || absent == 0 {
			t.Fatalf("k=%d: %d present, %d absent: the answers are not mixed", k, present, absent)
		}
	}
	if !useAVX512 {
		t.Log("this CPU has no AVX-512: only the scalar probes were checked")
	}
}
