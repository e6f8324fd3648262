package filter

import (
	"math/rand/v2"
	"testing"
)

// TestLookupKeyHash checks lookupKey's and hashKeys's hashes against Hash and
// HashString (the xxh3 package) at every length up to shortKeyMax and beyond,
// for several seeds, and lookupKey's answer against MayContainHash.
func TestLookupKeyHash(t *testing.T) {
	r := rand.New(rand.NewPCG(8, 2))
	buf := make([]byte, shortKeyMax+40)
	for _, seed := range []uint64{0, 1, 42, 0x8000_0000, 1<<63 | 5, r.Uint64(), r.Uint64()} {
		f, err := NewBloom(BloomConfig{Capacity: 50, FPRate: 0.1, Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		for l := 0; l <= len(buf); l++ {
			for range 8 {
				for i := range buf {
					buf[i] = byte(r.Uint32())
				}
				key := buf[:l]
				if r.IntN(2) == 0 {
					f.Add(key)
				}
				want := Hash(key, seed)
				h, maybe := lookupKey(f, key)
				if h != want || maybe != f.MayContainHash(want) {
					t.Fatalf("len %d seed %#x: lookupKey = %#x, %v; Hash = %#x, MayContainHash %v", l, seed, h, maybe, want, f.MayContainHash(want))
				}
				if hs, ms := lookupKey(f, string(key)); hs != h || ms != maybe {
					t.Fatalf("len %d seed %#x: string key %#x, %v; bytes %#x, %v", l, seed, hs, ms, h, maybe)
				}
				var group [3]uint64
				hashKeys([][]byte{buf[:0], key, buf[:l/2]}, seed, group[:])
				if group != [3]uint64{Hash(nil, seed), want, Hash(buf[:l/2], seed)} {
					t.Fatalf("len %d seed %#x: hashKeys = %#x", l, seed, group)
				}
				hashKeys([]string{"", string(key), string(buf[:l/2])}, seed, group[:])
				if group != [3]uint64{Hash(nil, seed), want, Hash(buf[:l/2], seed)} {
					t.Fatalf("len %d seed %#x: hashKeys of strings = %#x", l, seed, group)
				}
			}
		}
	}
}
