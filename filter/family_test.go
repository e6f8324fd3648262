package filter_test

import (
	"bytes"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
)

// TestFamilies checks the registry against itself: each family is found by
// its name and its tag, and a filter it builds encodes under its tag and
// decodes back into the same family.
func TestFamilies(t *testing.T) {
	fams := filter.Families()
	if len(fams) != 5 {
		t.Fatalf("Families() has %d families, want 5", len(fams))
	}
	for _, f := range fams {
		t.Run(f.Name, func(t *testing.T) {
			if got := filter.FamilyNamed(f.Name); got != f {
				t.Fatalf("FamilyNamed(%q) = %v", f.Name, got)
			}
			if got := f.Kind.Family(); got != f {
				t.Fatalf("Kind(%d).Family() = %v", f.Kind, got)
			}
			if f.Kind.String() != f.Name {
				t.Fatalf("Kind(%d).String() = %q, want %q", f.Kind, f.Kind.String(), f.Name)
			}
			if f.New == nil {
				if f != filter.FamilyWindowed {
					t.Fatal("no constructor")
				}
				return
			}
			flt, err := f.New(filter.FamilyConfig{Capacity: 1000, FPRate: 0.01, Seed: 7})
			if err != nil {
				t.Fatal(err)
			}
			if flt.Stats().Kind != f.Kind || flt.Seed() != 7 {
				t.Fatalf("built %v seed %d", flt.Stats().Kind, flt.Seed())
			}
			_, removes := flt.(interface{ RemoveHash(uint64) error })
			if removes != f.Removes {
				t.Fatalf("RemoveHash implemented: %v, Removes: %v", removes, f.Removes)
			}
			var buf bytes.Buffer
			if _, err := flt.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			back, err := filter.Decode(&buf, filter.DecodeConfig{})
			if err != nil {
				t.Fatal(err)
			}
			if back.Stats().Kind != f.Kind {
				t.Fatalf("decoded as %v", back.Stats().Kind)
			}
		})
	}
	if filter.FamilyNamed("nope") != nil || filter.Kind(0).Family() != nil || filter.Kind(200).Family() != nil {
		t.Fatal("an unknown name or tag has a family")
	}
	if got := filter.Kind(200).String(); got != "kind(200)" {
		t.Fatalf("Kind(200).String() = %q", got)
	}
}

// TestFamilyCuckooGrows checks FamilyConfig.MaxFilters reaches the cuckoo
// filter: one sub-filter refuses keys past its capacity, eight grow.
func TestFamilyCuckooGrows(t *testing.T) {
	for _, tc := range []struct {
		maxFilters int
		wantFull   bool
	}{{0, true}, {8, false}} {
		f, err := filter.FamilyCuckoo.New(filter.FamilyConfig{Capacity: 100, FPRate: 0.01, MaxFilters: tc.maxFilters})
		if err != nil {
			t.Fatal(err)
		}
		add := f.(interface{ AddHash(uint64) error })
		full := false
		for i := uint64(0); i < 1000 && !full; i++ {
			full = add.AddHash(i*0x9E3779B97F4A7C15) != nil
		}
		if full != tc.wantFull {
			t.Fatalf("MaxFilters %d: full after 1000 adds to capacity 100: %v, want %v", tc.maxFilters, full, tc.wantFull)
		}
	}
}
