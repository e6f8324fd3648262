package filter

import "math/bits"

// lookupKey hashes key with XXH3-64 under f's seed, exactly as Hash and
// HashString do, and probes f: it returns the hash and MayContainHash(hash).
// Keys of up to shortKeyMax bytes are hashed by the code written out here,
// so for them the lookup is a leaf function: MayContain calls nothing but
// lookupKey, nothing is spilled around a call, and the lookup costs what the
// caller-hashed MayContainHash(Hash(key)) costs. Longer keys go through the
// xxh3 package. TestLookupKeyHash checks every length against it.
func lookupKey[T string | []byte](f *Bloom, p T) (h uint64, maybe bool) {
	seed := f.seed
	switch l := len(p); {
	case l > shortKeyMax:
		h = hashLong(p, seed)
	case l > 16:
		acc := uint64(l) * xxPrime64_1
		if l > 32 {
			if l > 64 {
				if l > 96 {
					acc += mulFold64(readLE64(p, 6*8)^(xxKey064_096+seed), readLE64(p, 7*8)^(xxKey064_104-seed))
					acc += mulFold64(readLE64(p, l-8*8)^(xxKey064_112+seed), readLE64(p, l-7*8)^(xxKey064_120-seed))
				}
				acc += mulFold64(readLE64(p, 4*8)^(xxKey064_064+seed), readLE64(p, 5*8)^(xxKey064_072-seed))
				acc += mulFold64(readLE64(p, l-6*8)^(xxKey064_080+seed), readLE64(p, l-5*8)^(xxKey064_088-seed))
			}
			acc += mulFold64(readLE64(p, 2*8)^(xxKey064_032+seed), readLE64(p, 3*8)^(xxKey064_040-seed))
			acc += mulFold64(readLE64(p, l-4*8)^(xxKey064_048+seed), readLE64(p, l-3*8)^(xxKey064_056-seed))
		}
		acc += mulFold64(readLE64(p, 0)^(xxKey064_000+seed), readLE64(p, 8)^(xxKey064_008-seed))
		acc += mulFold64(readLE64(p, l-2*8)^(xxKey064_016+seed), readLE64(p, l-8)^(xxKey064_024-seed))
		h = xxh3Avalanche(acc)
	case l > 8:
		lo := readLE64(p, 0) ^ (xxKey064_024 ^ xxKey064_032 + seed)
		hi := readLE64(p, l-8) ^ (xxKey064_040 ^ xxKey064_048 - seed)
		h = xxh3Avalanche(uint64(l) + bits.ReverseBytes64(lo) + hi + mulFold64(lo, hi))
	case l > 3:
		s := seed ^ uint64(bits.ReverseBytes32(uint32(seed)))<<32
		in := uint64(readLE32(p, l-4)) + uint64(readLE32(p, 0))<<32
		h = rrmxmx(in^(xxKey064_008^xxKey064_016-s), uint64(l))
	case l == 0:
		h = xxhAvalancheSmall(seed ^ xxKey064_056 ^ xxKey064_064)
	default: // 1 to 3 bytes
		c1, c2, c3 := uint64(p[0]), uint64(p[l>>1]), uint64(p[l-1])
		acc := c1<<16 | c2<<24 | c3 | uint64(l)<<8
		h = xxhAvalancheSmall(acc ^ (uint64(xxKey032_000^xxKey032_004) + seed))
	}
	return h, f.MayContainHash(h)
}

// hashKeys sets hs[i] to the XXH3-64 hash of keys[i] under seed, exactly as
// Hash and HashString compute it (len(hs) >= len(keys)). Keys of up to
// shortKeyMax bytes are hashed by the code written out here, inside the loop:
// a group of keys costs one call, not one per key, nothing is spilled around
// a call per key, and the loads of consecutive keys overlap. Longer keys go
// through the xxh3 package. TestLookupKeyHash checks every length against it.
func hashKeys[T string | []byte](keys []T, seed uint64, hs []uint64) {
	hs = hs[:len(keys)]
	for i, p := range keys {
		var h uint64
		switch l := len(p); {
		case l > shortKeyMax:
			h = hashLong(p, seed)
		case l > 16:
			acc := uint64(l) * xxPrime64_1
			if l > 32 {
				if l > 64 {
					if l > 96 {
						acc += mulFold64(readLE64(p, 6*8)^(xxKey064_096+seed), readLE64(p, 7*8)^(xxKey064_104-seed))
						acc += mulFold64(readLE64(p, l-8*8)^(xxKey064_112+seed), readLE64(p, l-7*8)^(xxKey064_120-seed))
					}
					acc += mulFold64(readLE64(p, 4*8)^(xxKey064_064+seed), readLE64(p, 5*8)^(xxKey064_072-seed))
					acc += mulFold64(readLE64(p, l-6*8)^(xxKey064_080+seed), readLE64(p, l-5*8)^(xxKey064_088-seed))
				}
				acc += mulFold64(readLE64(p, 2*8)^(xxKey064_032+seed), readLE64(p, 3*8)^(xxKey064_040-seed))
				acc += mulFold64(readLE64(p, l-4*8)^(xxKey064_048+seed), readLE64(p, l-3*8)^(xxKey064_056-seed))
			}
			acc += mulFold64(readLE64(p, 0)^(xxKey064_000+seed), readLE64(p, 8)^(xxKey064_008-seed))
			acc += mulFold64(readLE64(p, l-2*8)^(xxKey064_016+seed), readLE64(p, l-8)^(xxKey064_024-seed))
			h = xxh3Avalanche(acc)
		case l > 8:
			lo := readLE64(p, 0) ^ (xxKey064_024 ^ xxKey064_032 + seed)
			hi := readLE64(p, l-8) ^ (xxKey064_040 ^ xxKey064_048 - seed)
			h = xxh3Avalanche(uint64(l) + bits.ReverseBytes64(lo) + hi + mulFold64(lo, hi))
		case l > 3:
			s := seed ^ uint64(bits.ReverseBytes32(uint32(seed)))<<32
			in := uint64(readLE32(p, l-4)) + uint64(readLE32(p, 0))<<32
			h = rrmxmx(in^(xxKey064_008^xxKey064_016-s), uint64(l))
		case l == 0:
			h = xxhAvalancheSmall(seed ^ xxKey064_056 ^ xxKey064_064)
		default: // 1 to 3 bytes
			c1, c2, c3 := uint64(p[0]), uint64(p[l>>1]), uint64(p[l-1])
			acc := c1<<16 | c2<<24 | c3 | uint64(l)<<8
			h = xxhAvalancheSmall(acc ^ (uint64(xxKey032_000^xxKey032_004) + seed))
		}
		hs[i] = h
	}
}

// hashLong is Hash or HashString, whichever matches T.
func hashLong[T string | []byte](p T, seed uint64) uint64 {
	switch k := any(p).(type) {
	case string:
		return HashString(k, seed)
	case []byte:
		return Hash(k, seed)
	}
	panic("unreachable")
}

// shortKeyMax is the longest key lookupKey hashes itself.
const shortKeyMax = 128

// XXH3 constants: primes and the first bytes of its default secret, read as
// little-endian words at the byte offsets in their names.
const (
	xxPrime64_1 = 11400714785074694791
	xxPrime64_2 = 14029467366897019727
	xxPrime64_3 = 1609587929392839161

	xxKey064_000 = 0xbe4ba423396cfeb8
	xxKey064_008 = 0x1cad21f72c81017c
	xxKey064_016 = 0xdb979083e96dd4de
	xxKey064_024 = 0x1f67b3b7a4a44072
	xxKey064_032 = 0x78e5c0cc4ee679cb
	xxKey064_040 = 0x2172ffcc7dd05a82
	xxKey064_048 = 0x8e2443f7744608b8
	xxKey064_056 = 0x4c263a81e69035e0
	xxKey064_064 = 0xcb00c391bb52283c
	xxKey064_072 = 0xa32e531b8b65d088
	xxKey064_080 = 0x4ef90da297486471
	xxKey064_088 = 0xd8acdea946ef1938
	xxKey064_096 = 0x3f349ce33f76faa8
	xxKey064_104 = 0x1d4f0bc7c7bbdcf9
	xxKey064_112 = 0x3159b4cd4be0518a
	xxKey064_120 = 0x647378d9c97e9fc8

	xxKey032_000 = 0xbe4ba423
	xxKey032_004 = 0x396cfeb8
)

func readLE64[T string | []byte](p T, i int) uint64 {
	p = p[i : i+8]
	return uint64(p[0]) | uint64(p[1])<<8 | uint64(p[2])<<16 | uint64(p[3])<<24 |
		uint64(p[4])<<32 | uint64(p[5])<<40 | uint64(p[6])<<48 | uint64(p[7])<<56
}

func readLE32[T string | []byte](p T, i int) uint32 {
	p = p[i : i+4]
	return uint32(p[0]) | uint32(p[1])<<8 | uint32(p[2])<<16 | uint32(p[3])<<24
}

func mulFold64(x, y uint64) uint64 {
	hi, lo := bits.Mul64(x, y)
	return hi ^ lo
}

func xxh3Avalanche(x uint64) uint64 {
	x ^= x >> 37
	x *= 0x165667919e3779f9
	return x ^ x>>32
}

func xxhAvalancheSmall(x uint64) uint64 {
	x ^= x >> 33
	x *= xxPrime64_2
	x ^= x >> 29
	x *= xxPrime64_3
	return x ^ x>>32
}

func rrmxmx(h, l uint64) uint64 {
	h ^= bits.RotateLeft64(h, 49) ^ bits.RotateLeft64(h, 24)
	h *= 0x9fb21c651e98df25
	h ^= (h >> 35) + l
	h *= 0x9fb21c651e98df25
	return h ^ h>>28
}
