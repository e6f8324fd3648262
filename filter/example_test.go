package filter_test

import (
	"bytes"
	"fmt"

	"github.com/bloomgate/bloomgate/filter"
)

func ExampleBloom() {
	f, err := filter.NewBloom(filter.BloomConfig{Capacity: 1_000_000, FPRate: 0.001})
	if err != nil {
		panic(err)
	}
	f.AddString("alice@example.com")
	fmt.Println(f.MayContainString("alice@example.com"))
	fmt.Println(f.MayContainString("mallory@example.com"))
	// Output:
	// true
	// false
}

func ExampleSizeBloom() {
	s, _ := filter.SizeBloom(10_000_000, 0.001)
	fmt.Printf("%.1f MiB, k=%d, %.2f bits/key\n", float64(s.Bytes())/(1<<20), s.K, s.BitsPerKey())
	// Output: 18.5 MiB, k=9, 15.55 bits/key
}

func ExampleDecode() {
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 1000})
	f.AddString("bob@example.com")
	var snapshot bytes.Buffer
	f.WriteTo(&snapshot)

	g, err := filter.Decode(&snapshot, filter.DecodeConfig{})
	if err != nil {
		panic(err)
	}
	fmt.Println(g.MayContainString("bob@example.com"), g.Stats().Kind)
	// Output: true bloom
}

// The consumer of a filter defines the interface it needs (here: adds that
// last for the filter's whole life, by hash) and hashes each key once with
// the filter's own seed. A Windowed, whose adds expire, does not satisfy it.
func ExampleFilter() {
	type membership interface {
		filter.Filter
		AddHash(h uint64) error
	}
	c, err := filter.NewCuckoo(filter.CuckooConfig{Capacity: 1000})
	if err != nil {
		panic(err)
	}
	var m membership = c
	h := m.Hash([]byte("carol@example.com"))
	if err := m.AddHash(h); err != nil {
		panic(err)
	}
	fmt.Println(m.MayContainHash(h), m.MayContainString("carol@example.com"), m.Items())
	// Output: true true 1
}
