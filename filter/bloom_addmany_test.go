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
