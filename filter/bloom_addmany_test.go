package filter_test

import (
	"bytes"
	"io"
	"sync"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// The conformance suite with every key added through the batched adds.
func TestBloomAddManyConformance(t *testing.T) {
	filtertest.Run(t, filtertest.Factory{
		New: func(n uint64, p float64) (filter.Filter, error) {
			return filter.NewBloom(filter.BloomConfig{Capacity: n, FPRate: p, Seed: 7})
		},
		Decode:    func(r io.Reader) (filter.Filter, error) { return filter.DecodeBloom(r, filter.DecodeConfig{}) },
		Add:       func(f filter.Filter, key []byte) error { return f.(*filter.Bloom).AddMany([][]byte{key}) },
		AddString: func(f filter.Filter, key string) error { return f.(*filter.Bloom).AddStrings([]string{key}) },
		AddHash:   func(f filter.Filter, h uint64) error { return f.(*filter.Bloom).AddHashMany([]uint64{h}) },
	})
}

// TestBloomAddManyMatchesAdd: AddMany, AddStrings and AddHashMany set exactly
// the bits Add sets and count every key, at every batch size around the
// internal group.
func TestBloomAddManyMatchesAdd(t *testing.T) {
	keys := filtertest.Emails(5000, 11)
	for _, n := range []int{0, 1, 31, 32, 33, 64, 65, 1000, 5000} {
		cfg := filter.BloomConfig{Capacity: 5000, FPRate: 0.01, Seed: 3}
		want, _ := filter.NewBloom(cfg)
		for _, k := range keys[:n] {
			want.Add(k)
		}
		many, _ := filter.NewBloom(cfg)
		many.AddMany(keys[:n])
		strs, _ := filter.NewBloom(cfg)
		ss := make([]string, n)
		hs := make([]uint64, n)
		for i, k := range keys[:n] {
			ss[i], hs[i] = string(k), strs.Hash(k)
		}
		strs.AddStrings(ss)
		hashed, _ := filter.NewBloom(cfg)
		hashed.AddHashMany(hs)
		var w bytes.Buffer
		want.WriteTo(&w)
		for name, f := range map[string]*filter.Bloom{"AddMany": many, "AddStrings": strs, "AddHashMany": hashed} {
			var g bytes.Buffer
			f.WriteTo(&g)
			if !bytes.Equal(g.Bytes(), w.Bytes()) {
				t.Fatalf("n=%d: %s encodes differently from Add", n, name)
			}
			if f.Items() != uint64(n) {
				t.Fatalf("n=%d: %s counted %d items", n, name, f.Items())
			}
		}
	}
}

// TestBloomAddManyConcurrent: keys added with AddMany from several
// goroutines while others look up are all present once it returns.
func TestBloomAddManyConcurrent(t *testing.T) {
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 200000, FPRate: 0.01})
	keys := filtertest.Emails(200000, 12)
	var wg sync.WaitGroup
	for w := range 4 {
		part := keys[w*50000 : (w+1)*50000]
		wg.Go(func() {
			for i := 0; i < len(part); i += 1000 {
				f.AddMany(part[i : i+1000])
				for _, k := range part[i : i+1000] {
					if !f.MayContain(k) {
						t.Errorf("false negative for %q right after AddMany", k)
						return
					}
				}
			}
		})
	}
	wg.Wait()
	filtertest.CheckPresent(t, f, keys)
	if f.Items() != uint64(len(keys)) {
		t.Fatalf("%d items, want %d", f.Items(), len(keys))
	}
}

func TestBloomAddManyAllocs(t *testing.T) {
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 1000})
	keys := filtertest.Emails(300, 13)
	if n := testing.AllocsPerRun(100, func() { f.AddMany(keys) }); n != 0 {
		t.Fatalf("AddMany allocates %.1f times", n)
	}
}

// TestBloomAddHashManyNewMatchesAdd: AddHashManyNew sets the bits AddHash
// sets, counts every hash, and reports as new exactly the hashes that
// MayContainHash reported absent just before each AddHash, one at a time:
// repeats within a batch and the false positives earlier keys of the batch
// cause included (a small, overfilled filter makes those common).
func TestBloomAddHashManyNewMatchesAdd(t *testing.T) {
	keys := filtertest.Emails(3000, 5)
	for _, n := range []int{0, 1, 31, 32, 33, 65, 3000} {
		cfg := filter.BloomConfig{Capacity: 300, FPRate: 0.05, Seed: 9}
		want, _ := filter.NewBloom(cfg)
		hs := make([]uint64, 0, 2*n)
		for i, k := range keys[:n] {
			hs = append(hs, want.Hash(k))
			if i%3 == 0 {
				hs = append(hs, want.Hash(keys[i/2])) // a repeat, in this batch or an earlier key
			}
		}
		wantNew := make([]bool, len(hs))
		wantN := 0
		for i, h := range hs {
			wantNew[i] = !want.MayContainHash(h)
			if wantNew[i] {
				wantN++
			}
			want.AddHash(h)
		}
		got, _ := filter.NewBloom(cfg)
		added := make([]bool, len(hs)+1)
		added[len(hs)] = true // past the batch: left alone
		if m := got.AddHashManyNew(hs, added); m != wantN {
			t.Fatalf("n=%d: %d new, want %d", n, m, wantN)
		}
		for i := range hs {
			if added[i] != wantNew[i] {
				t.Fatalf("n=%d: hash %d new=%v, one at a time %v", n, i, added[i], wantNew[i])
			}
		}
		if !added[len(hs)] {
			t.Fatalf("n=%d: AddHashManyNew wrote past len(hs)", n)
		}
		var w, g bytes.Buffer
		want.WriteTo(&w)
		got.WriteTo(&g)
		if !bytes.Equal(g.Bytes(), w.Bytes()) {
			t.Fatalf("n=%d: AddHashManyNew encodes differently from AddHash", n)
		}
		if got.Items() != uint64(len(hs)) {
			t.Fatalf("n=%d: %d items, want %d", n, got.Items(), len(hs))
		}
	}
}

func TestBloomAddHashManyNewAllocs(t *testing.T) {
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 1000, FPRate: 0.01})
	hs := make([]uint64, 100)
	for i := range hs {
		hs[i] = f.Hash([]byte{byte(i), byte(i >> 8)})
	}
	added := make([]bool, len(hs))
	if n := testing.AllocsPerRun(100, func() { f.AddHashManyNew(hs, added) }); n != 0 {
		t.Fatalf("AddHashManyNew allocates %.1f times", n)
	}
}
