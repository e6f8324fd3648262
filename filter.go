package bloomgate

import (
	"errors"
	"fmt"

	"github.com/bloomgate/bloomgate/filter"
)

// Filter is what a Gate needs of its membership filter: a set of 64-bit key
// hashes that never forgets. The gate hashes each key once, with
// filter.Hash(normalisedKey, Seed()), and hands the filter only the hash.
//
// An implementation must be safe for concurrent use: lookups run while other
// goroutines add (and, for a Remover, remove). filter.Bloom, filter.Scalable,
// filter.Counting and filter.Cuckoo implement it; filter.Windowed, whose keys
// expire, deliberately does not (its adds take an expiry).
type Filter interface {
	// Seed returns the seed of the filter's hash. The gate passes its own
	// seed to Config.NewFilter and refuses a filter that reports another.
	Seed() uint64
	// AddHash adds the key with hash h. After it returns nil,
	// MayContainHash(h) is true for as long as the filter lives, whatever
	// else is added. An error (filter.ErrFull, say) means h was not added.
	AddHash(h uint64) error
	// MayContainHash reports false only if no key with hash h was added.
	MayContainHash(h uint64) bool
	// Stats describes the filter's size and fill. The gate calls it for
	// Stats, metrics and rebuild checks, never on the lookup path.
	Stats() filter.Stats
}

// Remover is implemented by filters that can delete a key (filter.Counting,
// filter.Cuckoo). With one, Gate.Remove takes effect at once where it is
// safe (see Gate.Remove).
type Remover interface {
	// RemoveHash deletes one earlier AddHash(h). It returns an error, and
	// removes nothing, when no key with hash h is held.
	RemoveHash(h uint64) error
}

// NewBloom is the default Config.NewFilter: a blocked filter.Bloom.
func NewBloom(capacity uint64, fpRate float64, seed uint64) (Filter, error) {
	return newFamily(filter.FamilyBloom, capacity, fpRate, seed, 0)
}

// NewCuckoo is a Config.NewFilter for a filter.Cuckoo, whose removes the gate
// applies. A full cuckoo filter refuses keys: the gate then fails open until
// Run rebuilds it larger.
func NewCuckoo(capacity uint64, fpRate float64, seed uint64) (Filter, error) {
	return newFamily(filter.FamilyCuckoo, capacity, fpRate, seed, 0)
}

// NewCounting is a Config.NewFilter for a filter.Counting, whose removes the
// gate applies.
func NewCounting(capacity uint64, fpRate float64, seed uint64) (Filter, error) {
	return newFamily(filter.FamilyCounting, capacity, fpRate, seed, 0)
}

// FamilyFilter returns a Config.NewFilter building fam's filters (NewBloom,
// NewCuckoo and NewCounting are FamilyFilter of their family with
// maxFilters 0). maxFilters is filter.FamilyConfig.MaxFilters: how many
// sub-filters a cuckoo filter may grow to before it refuses keys. A family
// without a constructor for a gate (filter.FamilyWindowed) makes every call
// return ErrNoFamilyFilter.
func FamilyFilter(fam *filter.Family, maxFilters int) func(capacity uint64, fpRate float64, seed uint64) (Filter, error) {
	return func(capacity uint64, fpRate float64, seed uint64) (Filter, error) {
		return newFamily(fam, capacity, fpRate, seed, maxFilters)
	}
}

// ErrNoFamilyFilter reports a filter family a gate cannot use: its adds
// take an expiry.
var ErrNoFamilyFilter = errors.New("bloomgate: filter family cannot back a gate")

func newFamily(fam *filter.Family, capacity uint64, fpRate float64, seed uint64, maxFilters int) (Filter, error) {
	if fam == nil || fam.New == nil {
		return nil, fmt.Errorf("%w: %v", ErrNoFamilyFilter, fam)
	}
	f, err := fam.New(filter.FamilyConfig{Capacity: capacity, FPRate: fpRate, Seed: seed, MaxFilters: maxFilters})
	if err != nil {
		return nil, err
	}
	gf, ok := f.(Filter)
	if !ok {
		return nil, fmt.Errorf("%w: %v", ErrNoFamilyFilter, fam)
	}
	return gf, nil
}

var (
	_ Filter  = (*filter.Bloom)(nil)
	_ Filter  = (*filter.Scalable)(nil)
	_ Filter  = (*filter.Counting)(nil)
	_ Filter  = (*filter.Cuckoo)(nil)
	_ Remover = (*filter.Counting)(nil)
	_ Remover = (*filter.Cuckoo)(nil)
)
