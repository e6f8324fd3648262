package filter_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// checkGolden compares enc with testdata/name, rewriting it under -update.
func checkGolden(t *testing.T, name string, enc []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, enc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if !bytes.Equal(enc, want) {
		t.Fatalf("encoding changed; if intended, bump the format version and run -update\n got %x\nwant %x", enc, want)
	}
	return want
}

// resealTail recomputes the trailing checksum of an encoding after a test
// patched it, so the decoder's checks past the checksum are exercised.
func resealTail(b []byte) []byte {
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// decodeGolden decodes the pinned bytes with the kind's own decoder and with
// the generic Decode, checks both hold every key, and returns both.
func decodeGolden(t *testing.T, want []byte, decode func(io.Reader) (filter.Filter, error), keys []string) []filter.Filter {
	t.Helper()
	var out []filter.Filter
	for _, dec := range []func(io.Reader) (filter.Filter, error){
		decode,
		func(r io.Reader) (filter.Filter, error) { return filter.Decode(r, filter.DecodeConfig{}) },
	} {
		f, err := dec(bytes.NewReader(want))
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if !f.MayContainString(k) {
				t.Fatalf("golden filter lost %q", k)
			}
		}
		out = append(out, f)
	}
	return out
}

// checkDecoded is what every fuzz target asserts of input its decoder
// accepted: re-encoding gives back the bytes it read, and the filter works —
// an accepted key stays (a full filter may refuse it with ErrFull) and, where
// the filter removes, can be removed.
func checkDecoded(t *testing.T, in []byte, flt filter.Filter) {
	t.Helper()
	var out bytes.Buffer
	if _, err := flt.WriteTo(&out); err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(in, out.Bytes()) {
		t.Fatalf("re-encoding changed the bytes:\n in %x\nout %x", in, out.Bytes())
	}
	flt.Stats()
	x := []byte("x")
	flt.MayContain(x)
	if err := addKey(flt, x); err != nil {
		if !errors.Is(err, filter.ErrFull) {
			t.Fatalf("Add: %v", err)
		}
		return
	}
	if !flt.MayContain(x) {
		t.Fatal("decoded filter lost a key")
	}
	if r, ok := flt.(interface{ Remove([]byte) error }); ok {
		if err := r.Remove(x); err != nil {
			t.Fatalf("Remove after Add: %v", err)
		}
	}
}

// addKey adds key to any family: with the family's Add, and for a Windowed
// with the longest expiry it takes (a zero expiry means now + MaxTTL).
func addKey(flt filter.Filter, key []byte) error {
	switch f := flt.(type) {
	case interface{ Add([]byte) error }:
		return f.Add(key)
	case *filter.Windowed:
		return f.Add(key, time.Time{})
	}
	panic(fmt.Sprintf("%T cannot add", flt))
}

// asFilter adapts a kind's constructor or decoder to return a Filter, nil on
// error.
func asFilter[F filter.Filter](f F, err error) (filter.Filter, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

// checkDecodeAgrees fails t when the generic Decode accepts what the kind's
// own decoder rejected (err) or the reverse; another kind is fine.
func checkDecodeAgrees(t *testing.T, in []byte, cfg filter.DecodeConfig, err error) {
	t.Helper()
	if _, gerr := filter.Decode(bytes.NewReader(in), cfg); (gerr == nil) != (err == nil) && !errors.Is(err, filter.ErrKindMismatch) {
		t.Fatalf("kind decoder: %v, Decode: %v", err, gerr)
	}
}

// TestDecodeErrorReturnsNilFilter decodes every truncation and every
// single-bit flip of every kind's golden bytes: whenever Decode returns an
// error, the Filter must be a nil interface, not an interface holding a nil
// pointer whose methods panic; and the kind's own decoder must return a nil
// pointer.
func TestDecodeErrorReturnsNilFilter(t *testing.T) {
	cfg := filter.DecodeConfig{}
	for kind, decode := range map[string]func(io.Reader) (bool, error){
		"bloom":    nilOnError(func(r io.Reader) (*filter.Bloom, error) { return filter.DecodeBloom(r, cfg) }),
		"scalable": nilOnError(func(r io.Reader) (*filter.Scalable, error) { return filter.DecodeScalable(r, cfg) }),
		"counting": nilOnError(func(r io.Reader) (*filter.Counting, error) { return filter.DecodeCounting(r, cfg) }),
		"cuckoo":   nilOnError(func(r io.Reader) (*filter.Cuckoo, error) { return filter.DecodeCuckoo(r, cfg) }),
		"windowed": nilOnError(func(r io.Reader) (*filter.Windowed, error) { return filter.DecodeWindowed(r, cfg, nil) }),
	} {
		t.Run(kind, func(t *testing.T) {
			enc, err := os.ReadFile(filepath.Join("testdata", kind+".golden"))
			if err != nil {
				t.Fatal(err)
			}
			var inputs, typedNil [2]int // truncated, flipped
			check := func(what string, in []byte, wantErr bool) {
				c := 1
				if wantErr {
					c = 0
				}
				inputs[c]++
				f, err := filter.Decode(bytes.NewReader(in), filter.DecodeConfig{})
				if err == nil {
					if wantErr {
						t.Errorf("%s: no error", what)
					}
					return
				}
				if f != nil {
					if typedNil[c]++; typedNil[c] <= 3 {
						t.Errorf("%s: Decode returned %T(%v) with error %v, want a nil Filter", what, f, f, err)
					}
				}
				if isNil, kerr := decode(bytes.NewReader(in)); kerr != nil && !isNil {
					t.Errorf("%s: Decode%s returned a non-nil filter with error %v", what, kind, kerr)
				}
			}
			for i := range len(enc) {
				check(fmt.Sprintf("truncated to %d of %d bytes", i, len(enc)), enc[:i], true)
			}
			for i := range len(enc) * 8 {
				bad := bytes.Clone(enc)
				bad[i/8] ^= 1 << (i % 8)
				check(fmt.Sprintf("bit %d flipped", i), bad, false)
			}
			if typedNil != [2]int{} {
				t.Fatalf("non-nil Filter with an error for %d of %d truncated inputs and %d of %d bit flips",
					typedNil[0], inputs[0], typedNil[1], inputs[1])
			}
		})
	}
}

// nilOnError adapts a kind's decoder to report whether the pointer it returned
// is nil.
func nilOnError[F any](decode func(io.Reader) (*F, error)) func(io.Reader) (bool, error) {
	return func(r io.Reader) (bool, error) {
		f, err := decode(r)
		return f == nil, err
	}
}

// TestDefaultFPRate checks that every family's Config takes a zero FPRate to
// mean DefaultFPRate.
func TestDefaultFPRate(t *testing.T) {
	if filter.DefaultFPRate != 0.001 {
		t.Fatalf("DefaultFPRate = %g, documented as 0.1 %%", filter.DefaultFPRate)
	}
	newFilters := map[string]func() (filter.Filter, error){
		"bloom":    func() (filter.Filter, error) { return asFilter(filter.NewBloom(filter.BloomConfig{Capacity: 100})) },
		"scalable": func() (filter.Filter, error) { return asFilter(filter.NewScalable(filter.ScalableConfig{})) },
		"counting": func() (filter.Filter, error) {
			return asFilter(filter.NewCounting(filter.CountingConfig{Capacity: 100}))
		},
		"cuckoo": func() (filter.Filter, error) { return asFilter(filter.NewCuckoo(filter.CuckooConfig{Capacity: 100})) },
		"windowed": func() (filter.Filter, error) {
			return asFilter(filter.NewWindowed(filter.WindowedConfig{MaxTTL: time.Hour, Capacity: 100}))
		},
	}
	for name, newFilter := range newFilters {
		f, err := newFilter()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := f.Stats().TargetFPRate; got != filter.DefaultFPRate {
			t.Errorf("%s: default FPRate %g, want DefaultFPRate", name, got)
		}
	}
}
