// Package filter holds bloomgate's probabilistic membership filters.
//
// Every filter answers MayContain with "definitely absent" (false) or "maybe
// present" (true). A filter never answers false for a key that was added and
// acknowledged (Add returned nil): there are no false negatives. False
// positives happen at a rate the filter is sized for.
//
// Keys are hashed once with XXH3-64 and a seed (see Hash); the hash and seed
// are recorded in the binary format, so a filter written by one process can be
// read by another. hash/maphash is deliberately not used: its seeds cannot be
// recreated in another process.
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
	switch k {
	case KindBloom:
		return "bloom"
	case KindScalable:
		return "scalable"
	case KindCounting:
		return "counting"
	case KindCuckoo:
		return "cuckoo"
	case KindWindowed:
		return "windowed"
	}
	return "kind(" + itoa(uint64(k)) + ")"
}

// Filter is what every filter family implements.
//
// Implementations document whether they are safe for concurrent use.
type Filter interface {
	// Add inserts key. After Add returns nil, MayContain(key) is true for
	// the lifetime of the filter. A non-nil error (for example ErrFull)
	// means the key was not added.
	Add(key []byte) error
	// AddString is Add for a string key, without converting it.
	AddString(key string) error
	// MayContain reports false if key is definitely absent, true if it may
	// be present.
	MayContain(key []byte) bool
	// MayContainString is MayContain for a string key.
	MayContainString(key string) bool
	// Stats reports the numbers an operator needs to decide on a rebuild.
	Stats() Stats
	// WriteTo writes the filter in the versioned binary format.
	WriteTo(w io.Writer) (int64, error)
}

// Remover is implemented by filters that can delete keys.
type Remover interface {
	// Remove deletes one earlier Add of key. Removing a key that was never
	// added is the caller's error and may cause false negatives for other
	// keys; implementations say how they guard against it.
	Remove(key []byte) error
	RemoveString(key string) error
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
	// returned ErrNotFound (filters implementing Remover; zero otherwise).
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
