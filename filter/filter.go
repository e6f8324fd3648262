// Package filter holds bloomgate's probabilistic membership filters.
//
// Every filter answers MayContain with "definitely absent" (false) or "maybe
// present" (true). A filter never answers false for a key that was added and
// acknowledged (Add returned nil) and not removed: there are no false
// negatives. Bloom, Scalable, Counting and Cuckoo keep such a key for the
// filter's whole life; a Windowed keeps it until the expiry given to its Add.
// False positives happen at a rate the filter is sized for (DefaultFPRate
// unless configured).
//
// Keys are hashed once with XXH3-64 and a seed (see Hash); the hash and seed
// are recorded in the binary format, so a filter written by one process can be
// read by another. hash/maphash is deliberately not used: its seeds cannot be
// recreated in another process.
//
// Every filter is safe for concurrent use (each type says how); a
// BloomBuilder, the single-writer way to fill a new Bloom, is not.
// docs/design.md describes the layouts and the binary format;
// docs/benchmarks.md compares them with other Go filters.
package filter

import (
	"errors"
	"io"
)

// Sentinel errors, matched with errors.Is.
var (
	// ErrInvalidParams reports a capacity, false-positive rate or other
	// parameter that no filter can be built from.
	ErrInvalidParams = errors.New("filter: invalid parameters")
	// ErrTooLarge reports a filter bigger than this package supports or than
	// the caller allowed (DecodeConfig.MaxBytes).
	ErrTooLarge = errors.New("filter: too large")
	// ErrCorrupt reports encoded input that is truncated, malformed or fails
	// its checksum.
	ErrCorrupt = errors.New("filter: corrupt encoding")
	// ErrUnsupported reports an encoding from a newer format version or with a
	// hash this build does not know.
	ErrUnsupported = errors.New("filter: unsupported encoding")
	// ErrKindMismatch reports decoding one filter kind as another.
	ErrKindMismatch = errors.New("filter: kind mismatch")
	// ErrIncompatible reports a union of filters with different geometry,
	// hash or seed.
	ErrIncompatible = errors.New("filter: incompatible filters")
	// ErrFull reports a filter that cannot take another key without breaking
	// its guarantees. The key was not added; every key added before is still
	// reported present.
	ErrFull = errors.New("filter: full")
	// ErrNotFound reports a Remove of a key the filter does not hold.
	// Nothing was removed. It means deletes are out of step with adds;
	// Stats.RemoveMisses counts it.
	ErrNotFound = errors.New("filter: key not found")
	// ErrAmbiguous reports a Remove that matched entries in more than one
	// place and cannot tell which is the key's: deleting the wrong one would
	// make another key a false negative, so nothing was removed and the key
	// is still reported present.
	ErrAmbiguous = errors.New("filter: ambiguous remove")
)

// Kind identifies a filter family in the binary format. Values are part of the
// format and never change meaning.
type Kind uint8

// Filter kinds.
const (
	KindBloom    Kind = 1 // blocked Bloom filter (*Bloom)
	KindScalable Kind = 2 // scalable Bloom filter (*Scalable)
	KindCounting Kind = 3 // counting Bloom filter (*Counting)
	KindCuckoo   Kind = 4 // cuckoo filter (*Cuckoo)
	KindWindowed Kind = 5 // time-windowed Bloom generations (*Windowed)
)

func (k Kind) String() string {
	if f := k.Family(); f != nil {
		return f.Name
	}
	return "kind(" + itoa(uint64(k)) + ")"
}

// DefaultFPRate is the false-positive rate every constructor uses when its
// Config leaves FPRate zero: 0.1 %.
const DefaultFPRate = 0.001

// Filter is the read side every family shares: lookups, hashing, sizes and
// encoding. It has no Add: Bloom, Scalable, Counting and Cuckoo add keys
// for the filter's whole life (Add, AddString, AddHash), a Windowed adds them
// until an expiry; code that adds keys should define the small interface it
// needs where it uses it.
//
// Every implementation is safe for concurrent use; each documents when its
// lookups may wait.
type Filter interface {
	// Hash returns the hash of key under the filter's own seed, for the
	// family's hash-keyed methods (MayContainHash and its adds).
	Hash(key []byte) uint64
	// Seed returns the seed Hash uses.
	Seed() uint64
	// MayContain reports false if key is definitely absent, true if it may
	// be present. What "absent" means is the family's: for most, never
	// added (or removed); for a Windowed, not added with an expiry still
	// ahead.
	MayContain(key []byte) bool
	// MayContainString is MayContain for a string key.
	MayContainString(key string) bool
	// MayContainHash is MayContain for a key's hash (see Hash).
	MayContainHash(h uint64) bool
	// Stats reports the numbers an operator needs to decide on a rebuild.
	// It may read the whole table (O(size)): call it from monitoring, not
	// per lookup; Items and Bytes are cheap.
	Stats() Stats
	// Items returns the successful adds (duplicates counted) minus the
	// successful removes, without reading the table. A Windowed counts
	// only the adds in generations it has not dropped.
	Items() uint64
	// Bytes returns the memory held by the filter's table(s), without
	// reading them.
	Bytes() uint64
	// WriteTo writes the filter in the versioned binary format, which
	// Decode reads.
	WriteTo(w io.Writer) (int64, error)
}

// Stats describe a filter's size and fill.
type Stats struct {
	Kind Kind
	// Capacity is the number of keys the filter was sized for.
	Capacity uint64
	// TargetFPRate is the false-positive rate the filter was sized for.
	TargetFPRate float64
	// Items counts successful Add calls, duplicates included, minus
	// successful Remove calls.
	Items uint64
	// EstimatedDistinct estimates the number of distinct keys from the bits
	// set (Swamidass & Baldi 2007), which unlike Items ignores duplicates.
	EstimatedDistinct float64
	// Bytes is the memory held by the filter's table.
	Bytes uint64
	// Bits is the table size in bits.
	Bits uint64
	// K is the number of probes (hash functions) per key.
	K int
	// FillRatio is the fraction of bits (or slots) in use.
	FillRatio float64
	// EstimatedFPRate is the false-positive rate expected for an absent key
	// against the filter as it is now.
	EstimatedFPRate float64
	// RemoveMisses counts Remove calls that found the key absent and
	// returned ErrNotFound (Counting and Cuckoo; zero for the others).
	// A rising count means deletes are out of step with adds.
	RemoveMisses uint64
}

func itoa(v uint64) string {
	var b [20]byte
	i := len(b)
	for {
		i--
		b[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			return string(b[i:])
		}
	}
}
