package filter_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"testing"

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
	if err := flt.Add(x); err != nil {
		if !errors.Is(err, filter.ErrFull) {
			t.Fatalf("Add: %v", err)
		}
		return
	}
	if !flt.MayContain(x) {
		t.Fatal("decoded filter lost a key")
	}
	if r, ok := flt.(filter.Remover); ok {
		if err := r.Remove(x); err != nil {
			t.Fatalf("Remove after Add: %v", err)
		}
	}
}

// checkDecodeAgrees fails t when the generic Decode accepts what the kind's
// own decoder rejected (err) or the reverse; another kind is fine.
func checkDecodeAgrees(t *testing.T, in []byte, cfg filter.DecodeConfig, err error) {
	t.Helper()
	if _, gerr := filter.Decode(bytes.NewReader(in), cfg); (gerr == nil) != (err == nil) && !errors.Is(err, filter.ErrKindMismatch) {
		t.Fatalf("kind decoder: %v, Decode: %v", err, gerr)
	}
}
