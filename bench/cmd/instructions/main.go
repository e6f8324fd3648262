// Command instructions runs each timed loop of the Bloom comparison once, on
// 100k keys, as a separate function, so that valgrind can count the
// instructions each one executes; unlike times on a shared machine, the
// counts are reproducible. Per key, for function fn:
//
//	cd bench && go build -o /tmp/instr ./cmd/instructions
//	GODEBUG=asyncpreemptoff=1 GOGC=off GOMAXPROCS=1 valgrind --tool=callgrind \
//	  --callgrind-out-file=/dev/null --toggle-collect=main.fn /tmp/instr 2>&1 | grep Collected
//
// and divide by 100000. The functions: loopSingle (MayContain), loopString
// (MayContainString), loopHashed (MayContainHash(Hash(key))), loopBatch
// (MayContainMany, 256 keys a call), loopBlob (blobloom Has(Hash(key))),
// addBloom (Add), addBuilder (BloomBuilder.Add), addBlob (blobloom Add).
// Lookups are of absent keys.
package main

import (
	"fmt"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
	"github.com/greatroar/blobloom"
)

//go:noinline
func loopSingle(f *filter.Bloom, keys [][]byte) (n int) {
	for _, k := range keys {
		if f.MayContain(k) {
			n++
		}
	}
	return
}

//go:noinline
func loopString(f *filter.Bloom, keys []string) (n int) {
	for _, k := range keys {
		if f.MayContainString(k) {
			n++
		}
	}
	return
}

//go:noinline
func loopHashed(f *filter.Bloom, keys [][]byte) (n int) {
	for _, k := range keys {
		if f.MayContainHash(f.Hash(k)) {
			n++
		}
	}
	return
}

//go:noinline
func loopBatch(f *filter.Bloom, keys [][]byte) (n int) {
	var out [256]bool
	for i := 0; i < len(keys); i += 256 {
		n += f.MayContainMany(keys[i:min(i+256, len(keys))], out[:])
	}
	return
}

//go:noinline
func loopBlob(f *blobloom.Filter, keys [][]byte) (n int) {
	for _, k := range keys {
		if f.Has(filter.Hash(k, 0)) {
			n++
		}
	}
	return
}

//go:noinline
func addBuilder(b *filter.BloomBuilder, keys [][]byte) {
	for _, k := range keys {
		b.Add(k)
	}
}

//go:noinline
func addBloom(f *filter.Bloom, keys [][]byte) {
	for _, k := range keys {
		f.Add(k)
	}
}

//go:noinline
func addBlob(f *blobloom.Filter, keys [][]byte) {
	for _, k := range keys {
		f.Add(filter.Hash(k, 0))
	}
}

func main() {
	const n = 100_000
	present := filtertest.Emails(n, 1)
	absent := filtertest.Emails(n, 2)
	cfg := filter.BloomConfig{Capacity: n, FPRate: 0.001}
	f, _ := filter.NewBloom(cfg)
	addBloom(f, present)
	b, _ := filter.NewBloomBuilder(cfg)
	addBuilder(b, present)
	bl := blobloom.New(blobloom.Optimize(blobloom.Config{Capacity: n, FPRate: 0.001}))
	addBlob(bl, present)
	strs := make([]string, n)
	for i, k := range absent {
		strs[i] = string(k)
	}
	fmt.Println(loopString(f, strs))
	fmt.Println(loopSingle(f, absent), loopHashed(f, absent), loopBatch(f, absent), loopBlob(bl, absent))
}
