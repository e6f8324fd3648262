package filter_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// randomKeys returns n random keys of random lengths 0..maxLen.
func randomKeys(r *rand.Rand, n, maxLen int) [][]byte {
	keys := make([][]byte, n)
	for i := range keys {
		k := make([]byte, r.IntN(maxLen+1))
		for j := range k {
			k[j] = byte(r.Uint32())
		}
		keys[i] = k
	}
	return keys
}

// TestBloomBatchMatchesSingle checks that every batched lookup answers exactly
// what the one-at-a-time lookups answer, on random keys (half of them added)
// in batches of many sizes, including 0, odd sizes and sizes around the
// internal group of 16.
func TestBloomBatchMatchesSingle(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8, 1))
	for _, capacity := range []uint64{1, 50, 1000, 20_000} {
		for _, p := range []float64{0.3, 0.01, 0.001} {
			t.Run(fmt.Sprintf("n=%d/p=%g", capacity, p), func(t *testing.T) {
				f, err := filter.NewBloom(filter.BloomConfig{Capacity: capacity, FPRate: p, Seed: r.Uint64()})
				if err != nil {
					t.Fatal(err)
				}
				// Overfill the small filters so that answers are mixed.
				all := randomKeys(r, int(2*capacity)+40, 40)
				for i, k := range all {
					if i%2 == 0 {
						f.Add(k)
					}
				}
				for _, size := range []int{0, 1, 2, 3, 7, 15, 16, 17, 31, 32, 33, 100, 257, len(all)} {
					keys := all[:min(size, len(all))]
					r.Shuffle(len(keys), func(i, j int) { keys[i], keys[j] = keys[j], keys[i] })
					checkBatch(t, f, keys)
				}
			})
		}
	}
}

func checkBatch(t *testing.T, f *filter.Bloom, keys [][]byte) {
	t.Helper()
	strs := make([]string, len(keys))
	hashes := make([]uint64, len(keys))
	want := make([]bool, len(keys))
	wantN := 0
	for i, k := range keys {
		strs[i] = string(k)
		hashes[i] = f.Hash(k)
		want[i] = f.MayContain(k)
		if want[i] != f.MayContainString(strs[i]) || want[i] != f.MayContainHash(hashes[i]) {
			t.Fatalf("single lookups disagree on %q", k)
		}
		if want[i] {
			wantN++
		}
	}
	for name, lookup := range map[string]func(out []bool) int{
		"MayContainMany":     func(out []bool) int { return f.MayContainMany(keys, out) },
		"MayContainStrings":  func(out []bool) int { return f.MayContainStrings(strs, out) },
		"MayContainHashMany": func(out []bool) int { return f.MayContainHashMany(hashes, out) },
	} {
		// out is longer than needed and pre-filled: the tail must stay as it was.
		out := make([]bool, len(keys)+3)
		for i := range out {
			out[i] = i%3 == 0
		}
		n := lookup(out)
		if n != wantN {
			t.Errorf("%s(%d keys) = %d, want %d", name, len(keys), n, wantN)
		}
		for i := range keys {
			if out[i] != want[i] {
				t.Fatalf("%s: out[%d] = %v for %q, single lookup says %v", name, i, out[i], keys[i], want[i])
			}
		}
		for i := len(keys); i < len(out); i++ {
			if out[i] != (i%3 == 0) {
				t.Errorf("%s wrote out[%d] beyond len(keys) = %d", name, i, len(keys))
			}
		}
	}
}

func TestBloomBatchShortOut(t *testing.T) {
	t.Parallel()
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 100})
	keys := [][]byte{[]byte("a"), []byte("b"), []byte("c")}
	for name, fn := range map[string]func(){
		"MayContainMany":     func() { f.MayContainMany(keys, make([]bool, 2)) },
		"MayContainStrings":  func() { f.MayContainStrings([]string{"a", "b", "c"}, make([]bool, 2)) },
		"MayContainHashMany": func() { f.MayContainHashMany([]uint64{1, 2, 3}, nil) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s with a short out did not panic", name)
				}
			}()
			fn()
		}()
	}
	// Empty input needs no out at all.
	if n := f.MayContainMany(nil, nil) + f.MayContainStrings(nil, nil) + f.MayContainHashMany(nil, nil); n != 0 {
		t.Errorf("empty batches = %d, want 0", n)
	}
}

// TestBloomBatchConcurrentAdds runs batched lookups while other goroutines
// add: every key whose Add returned before the lookup started is present.
// Meant for -race.
func TestBloomBatchConcurrentAdds(t *testing.T) {
	t.Parallel()
	n := 40_000
	if raceEnabled {
		n = 8_000
	}
	keys := filtertest.Emails(n, 81)
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: uint64(n), FPRate: 0.01})
	const writers = 2
	var acked [writers]int64 // keys[w::writers][:acked[w]] are acknowledged
	var mu sync.Mutex
	var wg sync.WaitGroup
	for w := range writers {
		wg.Go(func() {
			for i := w; i < n; i += writers {
				if i%4 == 1 {
					f.AddString(string(keys[i]))
				} else {
					f.Add(keys[i])
				}
				mu.Lock()
				acked[w]++
				mu.Unlock()
			}
		})
	}
	out := make([]bool, n)
	strs := make([]string, n)
	hashes := make([]uint64, n)
	for i, k := range keys {
		strs[i], hashes[i] = string(k), f.Hash(k)
	}
	for round := 0; ; round++ {
		mu.Lock()
		snap := acked
		mu.Unlock()
		var got int
		switch round % 3 {
		case 0:
			got = f.MayContainMany(keys, out)
		case 1:
			got = f.MayContainStrings(strs, out)
		case 2:
			got = f.MayContainHashMany(hashes, out)
		}
		for w := range writers {
			for j := range snap[w] {
				if i := w + int(j)*writers; !out[i] {
					t.Fatalf("round %d: acknowledged key %q reported absent", round, keys[i])
				}
			}
		}
		if done := snap[0]+snap[1] == int64(n); done {
			if got != n {
				t.Fatalf("all keys added, batch reports %d of %d", got, n)
			}
			break
		}
	}
	wg.Wait()
}

func TestBloomBatchAllocs(t *testing.T) {
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 1000, FPRate: 0.01})
	keys := filtertest.Emails(100, 3)
	strs := make([]string, len(keys))
	hashes := make([]uint64, len(keys))
	for i, k := range keys {
		strs[i], hashes[i] = string(k), f.Hash(k)
		if i%2 == 0 {
			f.Add(k)
		}
	}
	out := make([]bool, len(keys))
	long := bytes.Repeat([]byte("long key "), 40) // beyond the inline hash
	slong := string(long)
	b, _ := filter.NewBloomBuilder(filter.BloomConfig{Capacity: 1000})
	for name, fn := range map[string]func(){
		"MayContainMany":        func() { f.MayContainMany(keys, out) },
		"MayContainStrings":     func() { f.MayContainStrings(strs, out) },
		"MayContainHashMany":    func() { f.MayContainHashMany(hashes, out) },
		"MayContainHash":        func() { f.MayContainHash(hashes[1]) },
		"MayContain/long":       func() { f.MayContain(long) },
		"MayContainString/long": func() { f.MayContainString(slong) },
		"Builder.Add":           func() { b.Add(keys[0]) },
		"Builder.AddString":     func() { b.AddString(strs[0]) },
		"Builder.AddHash":       func() { b.AddHash(hashes[0]) },
	} {
		if n := testing.AllocsPerRun(100, fn); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

// TestBloomBuilderMatchesAdd checks that a builder sets exactly the bits Add
// sets: the encodings of both filters are equal, byte for byte.
func TestBloomBuilderMatchesAdd(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(8, 3))
	for _, n := range []int{0, 1, 17, 5000} {
		for _, p := range []float64{0.01, 0.001} {
			cfg := filter.BloomConfig{Capacity: uint64(max(n, 1)), FPRate: p, Seed: 7}
			f, _ := filter.NewBloom(cfg)
			b, err := filter.NewBloomBuilder(cfg)
			if err != nil {
				t.Fatal(err)
			}
			keys := randomKeys(r, n, 30)
			for i, k := range keys {
				f.Add(k)
				switch i % 3 {
				case 0:
					b.Add(k)
				case 1:
					b.AddString(string(k))
				case 2:
					b.AddHash(b.Hash(k))
				}
			}
			g := b.Finish()
			filtertest.CheckPresent(t, g, keys)
			if got, want := g.Stats().Items, uint64(n); got != want {
				t.Errorf("n=%d: Items %d, want %d", n, got, want)
			}
			if !bytes.Equal(bloomBytes(t, f), bloomBytes(t, g)) {
				t.Errorf("n=%d p=%g: builder's filter differs from Add's", n, p)
			}
		}
	}
}

// TestBloomBuilderResume continues a decoded filter with Builder, then
// publishes it to concurrent readers and adders: nothing is lost.
func TestBloomBuilderResume(t *testing.T) {
	t.Parallel()
	keys := filtertest.Emails(6000, 82)
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 6000, FPRate: 0.01})
	for _, k := range keys[:2000] {
		f.Add(k)
	}
	g, err := filter.DecodeBloom(bytes.NewReader(bloomBytes(t, f)), filter.DecodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	b := g.Builder()
	for _, k := range keys[2000:4000] {
		b.Add(k)
	}
	if b.Finish() != g {
		t.Fatal("Finish did not return the filter Builder was called on")
	}
	if got := g.Stats().Items; got != 4000 {
		t.Errorf("Items = %d, want 4000", got)
	}
	var wg sync.WaitGroup // starting the goroutines publishes g
	wg.Go(func() {
		for _, k := range keys[4000:] {
			g.Add(k)
		}
	})
	wg.Go(func() { filtertest.CheckPresent(t, g, keys[:4000]) })
	wg.Wait()
	filtertest.CheckPresent(t, g, keys)
}

// bloomBytes returns f's encoding.
func bloomBytes(t *testing.T, f *filter.Bloom) []byte {
	t.Helper()
	var buf bytes.Buffer
	if _, err := f.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TestBloomBuilderAddHashManyMatchesAdd(t *testing.T) {
	for _, n := range []int{0, 1, 15, 16, 17, 100, 10000} {
		cfg := filter.BloomConfig{Capacity: 5000, FPRate: 0.01, Seed: 3}
		a, _ := filter.NewBloom(cfg)
		bb, _ := filter.NewBloomBuilder(cfg)
		keys := filtertest.Emails(n, 4)
		hs := make([]uint64, n)
		for i, k := range keys {
			a.Add(k)
			hs[i] = a.Hash(k)
		}
		bb.AddHashMany(hs)
		var x, y bytes.Buffer
		a.WriteTo(&x)
		bb.Finish().WriteTo(&y)
		if !bytes.Equal(x.Bytes(), y.Bytes()) {
			t.Fatalf("n=%d: AddHashMany built other bytes than Add", n)
		}
	}
}
