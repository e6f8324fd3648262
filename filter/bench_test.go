package filter_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

func BenchmarkBloom(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		for _, p := range []float64{0.01, 0.001} {
			b.Run(fmt.Sprintf("n=%d/p=%g", n, p), func(b *testing.B) { benchBloom(b, n, p) })
		}
	}
}

func benchBloom(b *testing.B, n int, p float64) {
	present := filtertest.Emails(n, 1)
	absent := filtertest.Emails(1<<16, 2)
	f, err := filter.NewBloom(filter.BloomConfig{Capacity: uint64(n), FPRate: p})
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range present {
		f.Add(k)
	}
	filtertest.BenchCore(b, filtertest.Bench{Full: f, Present: present, Absent: absent, NewAdd: func() func([]byte) {
		g, _ := filter.NewBloom(filter.BloomConfig{Capacity: uint64(n), FPRate: p})
		return func(k []byte) { g.Add(k) }
	}})
	b.Run("BuilderAdd", func(b *testing.B) {
		g, _ := filter.NewBloomBuilder(filter.BloomConfig{Capacity: uint64(n), FPRate: p})
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			g.Add(present[i%n])
			i++
		}
	})
	b.Run("MayContainString/absent", func(b *testing.B) {
		strs := make([]string, len(absent))
		for i, k := range absent {
			strs[i] = string(k)
		}
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			f.MayContainString(strs[i&(1<<16-1)])
			i++
		}
	})
	b.Run("MayContainHash/absent", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			f.MayContainHash(f.Hash(absent[i&(1<<16-1)]))
			i++
		}
	})
	// One op is one key, looked up in batches of 256.
	b.Run("MayContainMany/absent", func(b *testing.B) {
		const batch = 256
		var out [batch]bool
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i%batch == 0 {
				j := i & (1<<16 - 1)
				f.MayContainMany(absent[j:j+batch], out[:])
			}
			i++
		}
	})
	b.Run("Decode", func(b *testing.B) {
		var buf bytes.Buffer
		f.WriteTo(&buf)
		enc := buf.Bytes()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := filter.DecodeBloom(bytes.NewReader(enc), filter.DecodeConfig{}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
