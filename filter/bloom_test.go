package filter_test

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"math"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

func TestBloomConformance(t *testing.T) {
	filtertest.Run(t, filtertest.Factory{
		New: func(n uint64, p float64) (filter.Filter, error) {
			return filter.NewBloom(filter.BloomConfig{Capacity: n, FPRate: p, Seed: 42})
		},
		Decode: func(r io.Reader) (filter.Filter, error) { return filter.DecodeBloom(r, filter.DecodeConfig{}) },
		Large:  true,
	})
}

func TestSizeBloomInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		n    uint64
		p    float64
		want error
	}{
		{"zero capacity", 0, 0.01, filter.ErrInvalidParams},
		{"zero rate", 10, 0, filter.ErrInvalidParams},
		{"negative rate", 10, -0.1, filter.ErrInvalidParams},
		{"rate one", 10, 1, filter.ErrInvalidParams},
		{"rate above one", 10, 1.5, filter.ErrInvalidParams},
		{"NaN", 10, math.NaN(), filter.ErrInvalidParams},
		{"+Inf", 10, math.Inf(1), filter.ErrInvalidParams},
		{"rate too small", 10, 1e-15, filter.ErrInvalidParams},
		{"too large", math.MaxUint64 / 2, 0.01, filter.ErrTooLarge},
		{"too large at 1e15 keys", 1e15, 0.001, filter.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := filter.SizeBloom(tc.n, tc.p); !errors.Is(err, tc.want) {
				t.Fatalf("SizeBloom(%d, %v) = %v, want %v", tc.n, tc.p, err, tc.want)
			}
			if _, err := filter.NewBloom(filter.BloomConfig{Capacity: tc.n, FPRate: tc.p}); tc.p != 0 && !errors.Is(err, tc.want) {
				t.Fatalf("NewBloom: %v, want %v", err, tc.want)
			}
		})
	}
}

func TestSizeBloom(t *testing.T) {
	for _, tc := range []struct {
		n    uint64
		p    float64
		mib  float64 // classic size from MISSION.md, MiB
		maxK int
	}{
		{10_000_000, 0.01, 11.43, 8},
		{10_000_000, 0.001, 17.14, 11},
		{1_000_000, 0.01, 1.143, 8},
	} {
		s, err := filter.SizeBloom(tc.n, tc.p)
		if err != nil {
			t.Fatal(err)
		}
		classic := filter.ClassicBits(tc.n, tc.p)
		if got := classic / 8 / (1 << 20); math.Abs(got-tc.mib) > 0.01 {
			t.Errorf("classic size for n=%d p=%g = %.3f MiB, want %.3f", tc.n, tc.p, got, tc.mib)
		}
		if at := s.FPRateAt(tc.n); at > tc.p {
			t.Errorf("n=%d p=%g: rate at capacity %g exceeds target", tc.n, tc.p, at)
		}
		// The search finds the smallest blocked size: one block fewer misses.
		smaller := s
		smaller.Blocks--
		if smaller.FPRateAt(tc.n) <= tc.p {
			t.Errorf("n=%d p=%g: %d blocks is not minimal", tc.n, tc.p, s.Blocks)
		}
		if r := float64(s.Bits()) / classic; r < 1 || r > 1.10 {
			t.Errorf("n=%d p=%g: blocked/classic bits = %.3f, want within [1, 1.10]", tc.n, tc.p, r)
		}
		if s.K < 2 || s.K > tc.maxK {
			t.Errorf("n=%d p=%g: k = %d", tc.n, tc.p, s.K)
		}
		t.Logf("n=%d p=%g: %d blocks, %.2f bits/key (classic %.2f), k=%d", tc.n, tc.p, s.Blocks, s.BitsPerKey(), classic/float64(tc.n), s.K)
	}
}

func TestBloomStats(t *testing.T) {
	f, err := filter.NewBloom(filter.BloomConfig{Capacity: 100_000, FPRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.Items != 0 || s.FillRatio != 0 || s.EstimatedFPRate != 0 || s.EstimatedDistinct != 0 {
		t.Fatalf("empty filter stats: %+v", s)
	}
	keys := filtertest.Emails(100_000, 3)
	for _, k := range keys {
		f.Add(k)
	}
	for _, k := range keys[:1000] { // duplicates count as items, not distinct keys
		f.Add(k)
	}
	s := f.Stats()
	if s.Items != 101_000 {
		t.Errorf("Items = %d, want 101000", s.Items)
	}
	if d := s.EstimatedDistinct; math.Abs(d-100_000)/100_000 > 0.02 {
		t.Errorf("EstimatedDistinct = %.0f, want 100000 ± 2%%", d)
	}
	// Fill of an optimally loaded filter is near one half.
	if s.FillRatio < 0.4 || s.FillRatio > 0.6 {
		t.Errorf("FillRatio = %.3f", s.FillRatio)
	}
	want := f.Sizing().FPRateAt(100_000)
	if math.Abs(s.EstimatedFPRate-want)/want > 0.15 {
		t.Errorf("EstimatedFPRate = %.5f, model says %.5f", s.EstimatedFPRate, want)
	}
	measured := float64(filtertest.MeasureFP(f, filtertest.Emails(400_000, 4))) / 400_000
	if math.Abs(s.EstimatedFPRate-measured)/measured > 0.2 {
		t.Errorf("EstimatedFPRate = %.5f, measured %.5f", s.EstimatedFPRate, measured)
	}
	if s.Bytes != f.Sizing().Bytes() || s.Bits != s.Bytes*8 || s.Capacity != 100_000 || s.K != f.Sizing().K {
		t.Errorf("size fields: %+v", s)
	}
}

func TestBloomOverfill(t *testing.T) {
	// Overfill raises the estimated rate in step with the model, which is
	// what the gate's rebuild trigger watches.
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 10_000, FPRate: 0.01})
	for _, k := range filtertest.Emails(14_000, 5) {
		f.Add(k)
	}
	est, model := f.Stats().EstimatedFPRate, f.Sizing().FPRateAt(14_000)
	if est < 0.02 || math.Abs(est-model)/model > 0.2 {
		t.Fatalf("1.4× overfilled: estimated %.4f, model %.4f", est, model)
	}
}

func TestBloomUnionClone(t *testing.T) {
	cfg := filter.BloomConfig{Capacity: 10_000, FPRate: 0.01, Seed: 7}
	a, _ := filter.NewBloom(cfg)
	b, _ := filter.NewBloom(cfg)
	ka, kb := filtertest.Emails(3000, 1), filtertest.Emails(3000, 2)
	for i := range ka {
		a.Add(ka[i])
		b.Add(kb[i])
	}
	c := a.Clone()
	if err := c.Union(b); err != nil {
		t.Fatal(err)
	}
	filtertest.CheckPresent(t, c, ka)
	filtertest.CheckPresent(t, c, kb)
	if got := c.Stats().Items; got != 6000 {
		t.Errorf("union Items = %d", got)
	}
	// The clone is independent of the original.
	extra := []byte("only-in-clone@example.com")
	c.Add(extra)
	if a.MayContain(extra) && filtertest.MeasureFP(a, [][]byte{extra}) == 1 && a.Stats().Items != 3000 {
		t.Error("adding to the clone changed the original")
	}
	if a.Stats().Items != 3000 {
		t.Errorf("original Items = %d after adding to the clone", a.Stats().Items)
	}
	for _, other := range []filter.BloomConfig{
		{Capacity: 20_000, FPRate: 0.01, Seed: 7},
		{Capacity: 10_000, FPRate: 0.01, Seed: 8},
		{Capacity: 10_000, FPRate: 0.001, Seed: 7},
	} {
		o, _ := filter.NewBloom(other)
		if err := a.Union(o); !errors.Is(err, filter.ErrIncompatible) {
			t.Errorf("union with %+v: %v, want ErrIncompatible", other, err)
		}
	}
}

func TestBloomAllocs(t *testing.T) {
	f, _ := filter.NewBloom(filter.BloomConfig{Capacity: 1000, FPRate: 0.01})
	key := []byte("someone@example.com")
	skey := "someone@example.com"
	for name, fn := range map[string]func(){
		"Add":              func() { f.Add(key) },
		"AddString":        func() { f.AddString(skey) },
		"AddHash":          func() { f.AddHash(f.Hash(key)) },
		"MayContain":       func() { f.MayContain(key) },
		"MayContainString": func() { f.MayContainString(skey) },
		"MayContainHash":   func() { f.MayContainHash(f.Hash(key)) },
		"Items+Bytes":      func() { _ = f.Items() + f.Bytes() },
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

// goldenBloom is a small filter with fixed contents; its encoding is pinned
// in testdata/bloom.golden.
func goldenBloom(t testing.TB) *filter.Bloom {
	f, err := filter.NewBloom(filter.BloomConfig{Capacity: 20, FPRate: 0.01, Seed: 0x0123456789abcdef})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"alice@example.com", "bob@example.com", "carol@example.com"} {
		f.AddString(k)
	}
	return f
}

func TestBloomGolden(t *testing.T) {
	var buf bytes.Buffer
	if _, err := goldenBloom(t).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	want := checkGolden(t, "bloom.golden", buf.Bytes())
	// The pinned bytes decode, by kind and generically, to the same answers.
	decodeGolden(t, want, func(r io.Reader) (filter.Filter, error) { return filter.DecodeBloom(r, filter.DecodeConfig{}) },
		[]string{"alice@example.com", "bob@example.com", "carol@example.com"})
}

func TestDecodeErrors(t *testing.T) {
	var buf bytes.Buffer
	goldenBloom(t).WriteTo(&buf)
	enc := buf.Bytes()
	patch := func(off int, b ...byte) []byte {
		c := bytes.Clone(enc)
		copy(c[off:], b)
		return c
	}
	for _, tc := range []struct {
		name string
		in   []byte
		cfg  filter.DecodeConfig
		want error
	}{
		{"empty", nil, filter.DecodeConfig{}, filter.ErrCorrupt},
		{"bad magic", patch(0, 'X'), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"future version", patch(4, 2, 0), filter.DecodeConfig{}, filter.ErrUnsupported},
		{"other kind", patch(6, 99), filter.DecodeConfig{}, filter.ErrKindMismatch},
		{"unknown hash", patch(7, 9), filter.DecodeConfig{}, filter.ErrUnsupported},
		{"huge params", patch(16, 0xff, 0xff, 0xff, 0xff), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero blocks", patch(20+16, 0, 0, 0, 0, 0, 0, 0, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"2^40 blocks", patch(20+16, 0, 0, 0, 0, 0, 1, 0, 0), filter.DecodeConfig{}, filter.ErrTooLarge},
		{"over MaxBytes", enc, filter.DecodeConfig{MaxBytes: 32}, filter.ErrTooLarge},
		{"zero probes", patch(20+24, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"checksum", patch(len(enc)-1, enc[len(enc)-1]^1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"trailing payload byte", patch(len(enc)-5, enc[len(enc)-5]^1), filter.DecodeConfig{}, filter.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := filter.DecodeBloom(bytes.NewReader(tc.in), tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
	if _, err := filter.Decode(bytes.NewReader(patch(6, 99)), filter.DecodeConfig{}); !errors.Is(err, filter.ErrUnsupported) {
		t.Fatalf("Decode of unknown kind: %v", err)
	}
}

// FuzzDecode feeds arbitrary bytes to the decoder: it must return a filter or
// an error, never panic, and never allocate more than the input holds.
func FuzzDecode(f *testing.F) {
	var buf bytes.Buffer
	goldenBloom(f).WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:30])
	f.Add([]byte("BGF\x00\x01\x00\x01\x01"))
	big, _ := filter.NewBloom(filter.BloomConfig{Capacity: 2000, FPRate: 0.001})
	for _, k := range filtertest.Emails(1500, 9) {
		big.Add(k)
	}
	buf.Reset()
	big.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		flt, err := filter.Decode(bytes.NewReader(in), filter.DecodeConfig{MaxBytes: 1 << 20})
		if err != nil {
			if flt != nil {
				t.Fatalf("non-nil %T returned with error %v", flt, err)
			}
			return
		}
		// A decoded filter works and re-encodes to the same bytes.
		flt.MayContain([]byte("x"))
		// A full filter (cuckoo) may refuse the key; an accepted one stays.
		if err := addKey(flt, []byte("x")); err == nil && !flt.MayContain([]byte("x")) {
			t.Fatal("decoded filter lost a key")
		}
		flt.Stats()
	})
}
