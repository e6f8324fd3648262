package filter

// Family is one filter family: the name configurations use, the tag its
// binary format carries, and how to build and decode one. Families is the
// one list of them; the gate's constructors (bloomgate.NewBloom and its
// siblings), the server's set kinds and the keyspace's key kinds refer to
// it rather than naming families of their own.
//
// A Family is a fixed description: share the pointers, never modify them.
type Family struct {
	// Name is the family's name in configurations and reports ("bloom",
	// "cuckoo", …); equal to Kind.String().
	Name string
	// Kind is the family's tag in the binary format.
	Kind Kind
	// Removes reports that the family deletes keys (RemoveHash).
	Removes bool
	// New builds an empty filter sized by cfg. The filter adds key hashes
	// (AddHash) for its whole life. Nil for a family whose adds take an
	// expiry (Windowed), which is built with its own constructor.
	New func(cfg FamilyConfig) (Filter, error)

	decode func(fr *frameReader) (Filter, error)
}

// FamilyConfig sizes a filter built by Family.New.
type FamilyConfig struct {
	// Capacity is the number of keys the filter is sized for (a Scalable's
	// first sub-filter). Required; must be > 0.
	Capacity uint64
	// FPRate is the target false-positive rate. Default: DefaultFPRate.
	FPRate float64
	// Seed seeds the key hash. Default: 0.
	Seed uint64
	// MaxFilters is how many sub-filters a Cuckoo may grow to before it
	// refuses keys (CuckooConfig.MaxFilters); the other families ignore it.
	// Default (zero): 1, no growth.
	MaxFilters int
}

// The families, one each.
var (
	FamilyBloom = &Family{Name: "bloom", Kind: KindBloom,
		New: func(c FamilyConfig) (Filter, error) {
			return asFilter(NewBloom(BloomConfig{Capacity: c.Capacity, FPRate: c.FPRate, Seed: c.Seed}))
		},
		decode: func(fr *frameReader) (Filter, error) { return asFilter(decodeBloomBody(fr)) },
	}
	FamilyScalable = &Family{Name: "scalable", Kind: KindScalable,
		New: func(c FamilyConfig) (Filter, error) {
			return asFilter(NewScalable(ScalableConfig{InitialCapacity: c.Capacity, FPRate: c.FPRate, Seed: c.Seed}))
		},
		decode: func(fr *frameReader) (Filter, error) { return asFilter(decodeScalableBody(fr)) },
	}
	FamilyCounting = &Family{Name: "counting", Kind: KindCounting, Removes: true,
		New: func(c FamilyConfig) (Filter, error) {
			return asFilter(NewCounting(CountingConfig{Capacity: c.Capacity, FPRate: c.FPRate, Seed: c.Seed}))
		},
		decode: func(fr *frameReader) (Filter, error) { return asFilter(decodeCountingBody(fr)) },
	}
	FamilyCuckoo = &Family{Name: "cuckoo", Kind: KindCuckoo, Removes: true,
		New: func(c FamilyConfig) (Filter, error) {
			return asFilter(NewCuckoo(CuckooConfig{Capacity: c.Capacity, FPRate: c.FPRate, MaxFilters: c.MaxFilters, Seed: c.Seed}))
		},
		decode: func(fr *frameReader) (Filter, error) { return asFilter(decodeCuckooBody(fr)) },
	}
	FamilyWindowed = &Family{Name: "windowed", Kind: KindWindowed,
		decode: func(fr *frameReader) (Filter, error) { return asFilter(decodeWindowedBody(fr, nil)) },
	}
)

// families is indexed by Kind.
var families = [...]*Family{
	KindBloom:    FamilyBloom,
	KindScalable: FamilyScalable,
	KindCounting: FamilyCounting,
	KindCuckoo:   FamilyCuckoo,
	KindWindowed: FamilyWindowed,
}

// Families returns every family, in Kind order.
func Families() []*Family {
	out := make([]*Family, 0, len(families))
	for _, f := range families {
		if f != nil {
			out = append(out, f)
		}
	}
	return out
}

// Family returns the family k tags, or nil for a tag no family has.
func (k Kind) Family() *Family {
	if int(k) < len(families) {
		return families[k]
	}
	return nil
}

// FamilyNamed returns the family called name, or nil when none is.
func FamilyNamed(name string) *Family {
	for _, f := range families {
		if f != nil && f.Name == name {
			return f
		}
	}
	return nil
}

// String returns the family's name.
func (f *Family) String() string {
	if f == nil {
		return "no family"
	}
	return f.Name
}
