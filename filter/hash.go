package filter

import "github.com/zeebo/xxh3"

// hashID identifies the key hash in the binary format.
type hashID uint8

// hashXXH3 is XXH3-64 (seeded variant; seed 0 equals the unseeded XXH3-64).
// Its output for a key and seed never changes, so encoded filters stay valid
// across processes, machines and releases.
const hashXXH3 hashID = 1

// Hash returns the 64-bit hash every filter in this package uses for key.
func Hash(key []byte, seed uint64) uint64 { return xxh3.HashSeed(key, seed) }

// HashString is Hash for a string, without converting it.
func HashString(key string, seed uint64) uint64 { return xxh3.HashStringSeed(key, seed) }
