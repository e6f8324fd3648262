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
// addBloom (Add), addBuilder (BloomBuilder.Add), addBlob (blobloom Add),
// loopGate (Gate.MayContain), loopGateBatch (Gate.MayContainMany, 256 keys a
// call; the gate's filter has its own seed, so its false positives differ).
// Lookups are of absent keys.
package main

import (
	"context"
	"fmt"

	"github.com/bloomgate/bloomgate"
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
func loopGate(g *bloomgate.Gate, keys [][]byte) (n int) {
	for _, k := range keys {
		if g.MayContain(k) {
			n++
		}
	}
	return
}

//go:noinline
func loopGateBatch(g *bloomgate.Gate, keys [][]byte) (n int) {
	var out [256]bool
	for i := 0; i < len(keys); i += 256 {
		n += g.MayContainMany(keys[i:min(i+256, len(keys))], out[:])
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
	g, err := bloomgate.New(bloomgate.Config{Source: keySource(present), Capacity: n, FPRate: 0.001})
	if err != nil {
		panic(err)
	}
	if err := g.Warm(context.Background()); err != nil {
		panic(err)
	}
	fmt.Println(loopGate(g, absent), loopGateBatch(g, absent))
	fmt.Println(loopSingle(f, absent), loopHashed(f, absent), loopBatch(f, absent), loopBlob(bl, absent))
}

// keySource is a bloomgate.Source over keys in memory.
type keySource [][]byte

func (s keySource) Scan(ctx context.Context, fn func([]byte) error) error {
	for _, k := range s {
		if err := fn(k); err != nil {
			return err
		}
	}
	return nil
}

func (s keySource) Estimate(context.Context) (int64, error) { return int64(len(s)), nil }
