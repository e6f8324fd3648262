package filter_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

func TestScalableConformance(t *testing.T) {
	for _, tc := range []struct {
		name      string
		div       uint64 // initial capacity = n/div, so the suite's filters grow
		expansion uint32
		ratio     float64
	}{
		{"grow×2", 16, 2, 0.5},
		{"grow×4/r=0.8", 100, 4, 0.8},
	} {
		if raceEnabled && tc.expansion != 2 {
			continue // one variant is enough to find races
		}
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			filtertest.Run(t, filtertest.Factory{
				New: func(n uint64, p float64) (filter.Filter, error) {
					return filter.NewScalable(filter.ScalableConfig{
						InitialCapacity: max(1, n/tc.div), FPRate: p,
						Expansion: tc.expansion, TightenRatio: tc.ratio, Seed: 42,
					})
				},
				Decode: func(r io.Reader) (filter.Filter, error) {
					return filter.DecodeScalable(r, filter.DecodeConfig{})
				},
				Large: !raceEnabled,
			})
		})
	}
}

func TestNewScalableInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  filter.ScalableConfig
		want error
	}{
		{"rate one", filter.ScalableConfig{FPRate: 1}, filter.ErrInvalidParams},
		{"negative rate", filter.ScalableConfig{FPRate: -0.1}, filter.ErrInvalidParams},
		{"NaN rate", filter.ScalableConfig{FPRate: math.NaN()}, filter.ErrInvalidParams},
		{"rate too small", filter.ScalableConfig{FPRate: 1e-10}, filter.ErrInvalidParams},
		{"ratio one", filter.ScalableConfig{TightenRatio: 1}, filter.ErrInvalidParams},
		{"negative ratio", filter.ScalableConfig{TightenRatio: -0.5}, filter.ErrInvalidParams},
		{"NaN ratio", filter.ScalableConfig{TightenRatio: math.NaN()}, filter.ErrInvalidParams},
		{"expansion 65", filter.ScalableConfig{Expansion: 65}, filter.ErrInvalidParams},
		{"too large", filter.ScalableConfig{InitialCapacity: 1e15}, filter.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f, err := filter.NewScalable(tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("NewScalable(%+v) = %v, %v; want %v", tc.cfg, f, err, tc.want)
			}
		})
	}
}

func TestScalableDefaults(t *testing.T) {
	f, err := filter.NewScalable(filter.ScalableConfig{})
	if err != nil {
		t.Fatal(err)
	}
	s := f.Stats()
	if s.Kind != filter.KindScalable || s.Capacity != 10_000 || s.TargetFPRate != filter.DefaultFPRate || f.Filters() != 1 {
		t.Fatalf("defaults: %+v, %d filters", s, f.Filters())
	}
	// The first sub-filter is sized for FPRate·(1−0.5).
	want, _ := filter.SizeBloom(10_000, filter.DefaultFPRate*0.5)
	if s.Bytes != want.Bytes() || s.K != want.K {
		t.Fatalf("first sub-filter: %d bytes k=%d, want %d bytes k=%d", s.Bytes, s.K, want.Bytes(), want.K)
	}
}

func TestScalableGrowth(t *testing.T) {
	for _, tc := range []struct {
		expansion   uint32
		ratio       float64
		wantFilters int
		wantCap     uint64
	}{
		// 1000 + 2000 + 4000 + 8000 ≥ 10,000 keys.
		{2, 0.5, 4, 15_000},
		// 1000 + 4000 + 16000.
		{4, 0.9, 3, 21_000},
		// Ten sub-filters of 1000.
		{1, 0.5, 10, 10_000},
	} {
		t.Run(fmt.Sprintf("E=%d/r=%g", tc.expansion, tc.ratio), func(t *testing.T) {
			t.Parallel()
			const p = 0.01
			f, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 1000, FPRate: p, Expansion: tc.expansion, TightenRatio: tc.ratio})
			if err != nil {
				t.Fatal(err)
			}
			keys := filtertest.Emails(10_000, 1)
			for _, k := range keys {
				if err := f.Add(k); err != nil {
					t.Fatal(err)
				}
			}
			filtertest.CheckPresent(t, f, keys)
			s := f.Stats()
			if f.Filters() != tc.wantFilters || s.Capacity != tc.wantCap || s.Items != 10_000 {
				t.Fatalf("%d filters, capacity %d, items %d; want %d, %d, 10000", f.Filters(), s.Capacity, s.Items, tc.wantFilters, tc.wantCap)
			}
			if s.EstimatedFPRate > p {
				t.Errorf("estimated FP rate %g above the bound %g", s.EstimatedFPRate, p)
			}
			const q = 100_000
			got := filtertest.MeasureFP(f, filtertest.Emails(q, 2))
			if limit := filtertest.FPBound(q, p); got > limit {
				t.Fatalf("measured FP %d/%d above limit %d", got, q, limit)
			}
			t.Logf("%d filters, %d bytes, measured FP %.5f, estimated %.5f", f.Filters(), s.Bytes, float64(got)/q, s.EstimatedFPRate)
		})
	}
}

// TestScalableDuplicates checks that keys already present take no capacity.
func TestScalableDuplicates(t *testing.T) {
	f, _ := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 100})
	keys := filtertest.Emails(100, 3)
	for range 10 {
		for _, k := range keys {
			if err := f.Add(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	if s := f.Stats(); f.Filters() != 1 || s.Items != 1000 {
		t.Fatalf("%d filters, %d items; want 1 filter, 1000 items", f.Filters(), s.Items)
	}
}

func TestScalableNoScale(t *testing.T) {
	f, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 100, NoScale: true})
	if err != nil {
		t.Fatal(err)
	}
	var added [][]byte
	var full error
	for _, k := range filtertest.Emails(1000, 4) {
		if err := f.Add(k); err != nil {
			full = err
			break
		}
		added = append(added, k)
	}
	if !errors.Is(full, filter.ErrFull) {
		t.Fatalf("Add past capacity: %v, want ErrFull", full)
	}
	// At least the capacity went in (more when a new key was already
	// reported present and so took no place).
	if len(added) < 100 || len(added) > 110 {
		t.Fatalf("%d keys accepted before ErrFull, want about 100", len(added))
	}
	filtertest.CheckPresent(t, f, added)
	if f.Filters() != 1 || f.Stats().Items != uint64(len(added)) {
		t.Fatalf("%d filters, stats %+v", f.Filters(), f.Stats())
	}
	// Another new key is refused too, unless it is a false positive.
	k := "another-new-key@example.com"
	wasPresent := f.MayContainString(k)
	if err := f.AddString(k); wasPresent && err != nil || !wasPresent && !errors.Is(err, filter.ErrFull) {
		t.Fatalf("second Add past capacity: %v (reported present before: %v)", err, wasPresent)
	}
	// A key already present is still accepted.
	if err := f.Add(added[0]); err != nil {
		t.Fatalf("re-adding a present key: %v", err)
	}
}

// TestScalableGrowthLimit grows until the sub-filters' targets fall below
// MinFPRate: Add then returns ErrFull with the cause.
func TestScalableGrowthLimit(t *testing.T) {
	// Targets 0.0099, 9.9e-5, 9.9e-7, 9.9e-9, 9.9e-11 < MinFPRate.
	f, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 1, Expansion: 1, TightenRatio: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	keys := filtertest.Emails(5, 5)
	for _, k := range keys[:4] {
		if err := f.Add(k); err != nil {
			t.Fatal(err)
		}
	}
	err = f.Add(keys[4])
	if !errors.Is(err, filter.ErrFull) || !errors.Is(err, filter.ErrInvalidParams) {
		t.Fatalf("Add past the last sub-filter: %v, want ErrFull wrapping ErrInvalidParams", err)
	}
	filtertest.CheckPresent(t, f, keys[:4])
	if f.Filters() != 4 {
		t.Fatalf("%d filters, want 4", f.Filters())
	}
}

// TestScalableTenMillion grows a filter from 10,000 to 10 M keys (200,000
// under the race detector, where every atomic load is slow) and compares it
// with a Bloom filter sized for all keys up front.
func TestScalableTenMillion(t *testing.T) {
	if testing.Short() {
		t.Skip("adds 10 M keys")
	}
	const p = 0.001
	n, chunk := 10_000_000, 1_000_000
	if raceEnabled {
		n, chunk = 200_000, 100_000
	}
	f, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 10_000, FPRate: p})
	if err != nil {
		t.Fatal(err)
	}
	for c := range n / chunk {
		for _, k := range filtertest.Emails(chunk, 1000+uint64(c)) {
			if err := f.Add(k); err != nil {
				t.Fatal(err)
			}
		}
	}
	for c := range n / chunk {
		filtertest.CheckPresent(t, f, filtertest.Emails(chunk, 1000+uint64(c)))
	}
	q := 1_000_000
	if raceEnabled {
		q = 200_000
	}
	got := filtertest.MeasureFP(f, filtertest.Emails(q, 999))
	limit := filtertest.FPBound(q, p)
	s := f.Stats()
	single, err := filter.SizeBloom(uint64(n), p)
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(s.Bytes) / float64(single.Bytes())
	t.Logf("%d keys: %d sub-filters, capacity %d, %d bytes (%.2f bits/key), %.2f× a Bloom sized for %d (%d bytes)",
		n, f.Filters(), s.Capacity, s.Bytes, float64(s.Bits)/float64(n), ratio, n, single.Bytes())
	t.Logf("measured FP %d/%d = %.6f (target %g, limit %d), estimated %.6f", got, q, float64(got)/float64(q), p, limit, s.EstimatedFPRate)
	if got > limit {
		t.Errorf("measured FP %d/%d exceeds the target %g (limit %d)", got, q, p, limit)
	}
	if ratio > 2.5 {
		t.Errorf("memory %.2f× a Bloom sized up front, want ≤ 2.5×", ratio)
	}
}

// TestScalableConcurrentGrowth adds from several goroutines to a filter that
// grows many times, while readers check every acknowledged key.
func TestScalableConcurrentGrowth(t *testing.T) {
	const writers = 4
	perWriter := 20_000
	if raceEnabled {
		perWriter = 5000
	}
	f, _ := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 100, FPRate: 0.01})
	keys := make([][][]byte, writers)
	acked := make([]atomic.Int64, writers)
	for w := range keys {
		keys[w] = filtertest.Emails(perWriter, 200+uint64(w))
	}
	var wg, rg sync.WaitGroup
	var missing atomic.Int64
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i, k := range keys[w] {
				if err := f.Add(k); err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				acked[w].Store(int64(i + 1))
			}
		})
		rg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				n := acked[w].Load()
				for _, k := range keys[w][max(0, n-500):n] {
					if !f.MayContain(k) {
						missing.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	rg.Wait()
	if n := missing.Load(); n > 0 {
		t.Fatalf("%d acknowledged keys reported absent", n)
	}
	for _, ks := range keys {
		filtertest.CheckPresent(t, f, ks)
	}
	s := f.Stats()
	if s.Items != uint64(writers*perWriter) {
		t.Errorf("Items = %d, want %d", s.Items, writers*perWriter)
	}
	const q = 100_000
	if got, limit := filtertest.MeasureFP(f, filtertest.Emails(q, 299)), filtertest.FPBound(q, 0.01); got > limit {
		t.Errorf("measured FP %d/%d above limit %d", got, q, limit)
	}
	t.Logf("%d sub-filters, capacity %d, items %d", f.Filters(), s.Capacity, s.Items)
}

func TestScalableAllocs(t *testing.T) {
	f, _ := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 1 << 20})
	keys := filtertest.Emails(3000, 6)
	absent := []byte("someone@example.com")
	i := 0
	for name, fn := range map[string]func(){
		"Add":              func() { f.Add(keys[i%len(keys)]); i++ },
		"AddString":        func() { f.AddString("someone-else@example.com") },
		"MayContain":       func() { f.MayContain(absent) },
		"MayContainString": func() { f.MayContainString("nobody@example.com") },
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

func TestScalableStats(t *testing.T) {
	f, _ := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 10_000, FPRate: 0.01})
	keys := filtertest.Emails(50_000, 7)
	for _, k := range keys {
		f.Add(k)
	}
	s := f.Stats()
	if d := s.EstimatedDistinct; math.Abs(d-50_000)/50_000 > 0.03 {
		t.Errorf("EstimatedDistinct = %.0f, want 50000 ± 3%%", d)
	}
	if s.Bits != s.Bytes*8 || s.FillRatio <= 0.2 || s.FillRatio >= 0.6 {
		t.Errorf("size fields: %+v", s)
	}
	const q = 200_000
	measured := float64(filtertest.MeasureFP(f, filtertest.Emails(q, 8))) / q
	if math.Abs(s.EstimatedFPRate-measured)/measured > 0.25 {
		t.Errorf("EstimatedFPRate = %.5f, measured %.5f", s.EstimatedFPRate, measured)
	}
}

// goldenScalable is a small filter that has grown to three sub-filters; its
// encoding is pinned in testdata/scalable.golden.
func goldenScalable(t testing.TB) *filter.Scalable {
	f, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 4, FPRate: 0.01, Seed: 0x0123456789abcdef})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range goldenNames {
		if err := f.AddString(k); err != nil {
			t.Fatal(err)
		}
	}
	if f.Filters() != 3 {
		t.Fatalf("golden filter has %d sub-filters, want 3", f.Filters())
	}
	return f
}

var goldenNames = []string{
	"alice@example.com", "bob@example.com", "carol@example.com", "dave@example.com",
	"erin@example.com", "frank@example.com", "grace@example.com", "heidi@example.com",
	"ivan@example.com", "judy@example.com", "mike@example.com", "niaj@example.com",
	"olivia@example.com", "peggy@example.com",
}

func TestScalableGolden(t *testing.T) {
	var buf bytes.Buffer
	if _, err := goldenScalable(t).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	want := checkGolden(t, "scalable.golden", buf.Bytes())
	for _, f := range decodeGolden(t, want, func(r io.Reader) (filter.Filter, error) { return filter.DecodeScalable(r, filter.DecodeConfig{}) }, goldenNames) {
		if s := f.Stats(); s.Kind != filter.KindScalable || s.Items != uint64(len(goldenNames)) || s.Capacity != 4+8+16 {
			t.Fatalf("golden stats: %+v", s)
		}
	}
}

func TestDecodeScalableErrors(t *testing.T) {
	var buf bytes.Buffer
	goldenScalable(t).WriteTo(&buf)
	enc := buf.Bytes()
	patch := func(off int, b ...byte) []byte {
		c := bytes.Clone(enc)
		copy(c[off:], b)
		return c
	}
	const (
		params  = 20
		payload = params + 48
		sub     = payload + 8 // first sub-filter frame
	)
	subCRC := sub + 20 + 40 + 8 + 64*int(binary.LittleEndian.Uint64(enc[sub+20+16:]))
	var bloomEnc bytes.Buffer
	goldenBloom(t).WriteTo(&bloomEnc)
	for _, tc := range []struct {
		name string
		in   []byte
		cfg  filter.DecodeConfig
		want error
	}{
		{"empty", nil, filter.DecodeConfig{}, filter.ErrCorrupt},
		{"a Bloom", bloomEnc.Bytes(), filter.DecodeConfig{}, filter.ErrKindMismatch},
		{"short params", patch(16, 40), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero initial capacity", patch(params, 0, 0, 0, 0, 0, 0, 0, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"rate one", patch(params+8, 0, 0, 0, 0, 0, 0, 0xf0, 0x3f), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"ratio NaN", patch(params+16, 1, 0, 0, 0, 0, 0, 0xf8, 0x7f), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"expansion 0", patch(params+24, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"expansion 200", patch(params+24, 200), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"unknown flag", patch(params+28, 2), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"NoScale with 3 filters", patch(params+28, 1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero filters", patch(params+32, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"65 filters", patch(params+32, 65), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"2^32-1 filters", patch(params+32, 0xff, 0xff, 0xff, 0xff), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"2 filters", patch(params+32, 2), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"4 filters", patch(params+32, 4), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"reserved", patch(params+36, 1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"payload too short", patch(payload, 100, 0, 0, 0, 0, 0, 0, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"payload one byte long", patch(payload, enc[payload]+1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"payload 2^62", patch(payload, 0, 0, 0, 0, 0, 0, 0, 0x40), filter.DecodeConfig{}, filter.ErrTooLarge},
		{"over MaxBytes", enc, filter.DecodeConfig{MaxBytes: 256}, filter.ErrTooLarge},
		{"sub-filter magic", patch(sub, 'X'), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"sub-filter kind", patch(sub+6, 99), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"sub-filter blocks", patch(sub+20+16, 0, 0, 0, 0, 0, 1), filter.DecodeConfig{}, filter.ErrTooLarge},
		{"sub-filter checksum", patch(subCRC, enc[subCRC]^1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"checksum", patch(len(enc)-1, enc[len(enc)-1]^1), filter.DecodeConfig{}, filter.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := filter.DecodeScalable(bytes.NewReader(tc.in), tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzDecodeScalable feeds arbitrary bytes to the Scalable decoder: it must
// return a filter or an error, never panic nor allocate more than the input
// holds, and a filter it returns must re-encode to the bytes it read.
func FuzzDecodeScalable(f *testing.F) {
	var buf bytes.Buffer
	goldenScalable(f).WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:100])
	ns, _ := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 50, NoScale: true, Expansion: 4, TightenRatio: 0.9})
	for _, k := range filtertest.Emails(40, 10) {
		ns.Add(k)
	}
	buf.Reset()
	ns.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzScalable(t, in)
		// Once more with the checksums repaired, to reach the checks
		// behind them.
		in = bytes.Clone(in)
		reseal(in)
		fuzzScalable(t, in)
	})
}

// fuzzScalable checks one input: see the fuzz target.
func fuzzScalable(t *testing.T, in []byte) {
	cfg := filter.DecodeConfig{MaxBytes: 1 << 20}
	flt, err := filter.DecodeScalable(bytes.NewReader(in), cfg)
	checkDecodeAgrees(t, in, cfg, err)
	if err == nil {
		checkDecoded(t, in, flt)
	}
}

// reseal rewrites the checksum of the frame at the start of b, and of the
// frames nested in a Scalable's payload, so that fuzzed input reaches the
// checks behind them. It returns the frame's length, or -1 if b is too short
// to hold it.
func reseal(b []byte) int {
	if len(b) < 20 {
		return -1
	}
	p := int(binary.LittleEndian.Uint32(b[16:]))
	if p > 4096 || len(b) < 20+p+8 {
		return -1
	}
	body := 20 + p + 8
	l := binary.LittleEndian.Uint64(b[20+p:])
	if l > uint64(len(b)-body) || len(b)-body-int(l) < 4 {
		return -1
	}
	end := body + int(l)
	if b[6] == byte(filter.KindScalable) {
		for off := body; off < end; {
			n := reseal(b[off:end])
			if n < 0 {
				break
			}
			off += n
		}
	}
	binary.LittleEndian.PutUint32(b[end:], crc32.Checksum(b[:end], crc32.MakeTable(crc32.Castagnoli)))
	return end + 4
}

func ExampleScalable() {
	f, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 1000, FPRate: 0.001})
	if err != nil {
		panic(err)
	}
	for i := range 10_000 {
		f.AddString(fmt.Sprintf("user%d@example.com", i))
	}
	s := f.Stats()
	fmt.Println(f.Filters(), "sub-filters for", s.Items, "keys, capacity", s.Capacity)
	fmt.Println(f.MayContainString("user42@example.com"), f.MayContainString("mallory@example.com"))
	// Output:
	// 4 sub-filters for 10000 keys, capacity 15000
	// true false
}

func ExampleScalableConfig_noScale() {
	f, _ := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 2, NoScale: true})
	for _, k := range []string{"a", "b", "c"} {
		if err := f.AddString(k); errors.Is(err, filter.ErrFull) {
			fmt.Println(k, "rejected:", err)
		}
	}
	// Output: c rejected: filter: full: 2 keys (NoScale)
}

// BenchmarkScalable measures a filter grown from n/1000 to n keys (ten
// sub-filters at Expansion 2) against one created at capacity n.
func BenchmarkScalable(b *testing.B) {
	const n = 1_000_000
	present := filtertest.Emails(n, 1)
	absent := filtertest.Emails(1<<16, 2)
	for _, initial := range []uint64{n, n / 1000} {
		b.Run(fmt.Sprintf("n=%d/initial=%d", n, initial), func(b *testing.B) {
			cfg := filter.ScalableConfig{InitialCapacity: initial, FPRate: 0.001}
			f, _ := filter.NewScalable(cfg)
			for _, k := range present {
				f.Add(k)
			}
			b.Logf("%d sub-filters, %d bytes", f.Filters(), f.Stats().Bytes)
			filtertest.BenchCore(b, filtertest.Bench{Full: f, Present: present, Absent: absent, NewAdd: func() func([]byte) {
				g, _ := filter.NewScalable(cfg)
				return func(k []byte) { g.Add(k) }
			}})
		})
	}
}

// TestScalableAddAbsentHashesMatchesAdd: AddAbsentHashes answers and adds
// exactly as MayContainHash then AddHash per hash, skipping the ones held,
// do: across several scale-ups of a small filter, with repeats in a batch,
// and up to the refusal of a NoScale filter, where it stops. Items counts
// only the hashes added.
func TestScalableAddAbsentHashesMatchesAdd(t *testing.T) {
	keys := filtertest.Emails(4000, 3)
	for _, noScale := range []bool{false, true} {
		cfg := filter.ScalableConfig{InitialCapacity: 50, FPRate: 0.05, NoScale: noScale, Seed: 4}
		want, _ := filter.NewScalable(cfg)
		got, _ := filter.NewScalable(cfg)
		var wantItems uint64
		for start := 0; start < len(keys); {
			size := 1 + start%97 // batches of many sizes
			var hs []uint64
			for i, k := range keys[start:min(start+size, len(keys))] {
				hs = append(hs, want.Hash(k))
				if i%4 == 1 {
					hs = append(hs, hs[i/2])
				}
			}
			start += size
			wantNew := make([]bool, 0, len(hs))
			var wantErr error
			for _, h := range hs {
				if want.MayContainHash(h) {
					wantNew = append(wantNew, false)
					continue
				}
				if wantErr = want.AddHash(h); wantErr != nil {
					break
				}
				wantItems++
				wantNew = append(wantNew, true)
			}
			added := make([]bool, len(hs))
			n, err := got.AddAbsentHashes(hs, added)
			if (err != nil) != (wantErr != nil) || n != len(wantNew) {
				t.Fatalf("noScale=%v: AddAbsentHashes went through %d, %v; one at a time %d, %v", noScale, n, err, len(wantNew), wantErr)
			}
			if err != nil && !errors.Is(err, filter.ErrFull) {
				t.Fatalf("refusal %v does not wrap ErrFull", err)
			}
			for i := range wantNew {
				if added[i] != wantNew[i] {
					t.Fatalf("noScale=%v: hash %d added=%v, one at a time %v", noScale, i, added[i], wantNew[i])
				}
			}
			if got.Items() != wantItems || got.Filters() != want.Filters() {
				t.Fatalf("noScale=%v: %d items in %d sub-filters, want %d in %d", noScale, got.Items(), got.Filters(), wantItems, want.Filters())
			}
			if err != nil {
				break
			}
		}
		if !noScale && got.Filters() < 5 {
			t.Fatalf("the filter grew to only %d sub-filters", got.Filters())
		}
		var w, g bytes.Buffer
		want.WriteTo(&w)
		got.WriteTo(&g)
		if !bytes.Equal(g.Bytes(), w.Bytes()) {
			t.Fatalf("noScale=%v: AddAbsentHashes encodes differently", noScale)
		}
		for _, k := range keys[:200] {
			if want.MayContain(k) && !got.MayContain(k) {
				t.Fatalf("false negative for %s", k)
			}
		}
	}
}

// TestBytesIsStatsBytes: Bytes, which reads no table, reports what Stats
// does, for the growing families, before and after they grow (serve counts
// a key's memory with Bytes).
func TestBytesIsStatsBytes(t *testing.T) {
	s, err := filter.NewScalable(filter.ScalableConfig{InitialCapacity: 100, FPRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	c, err := filter.NewCuckoo(filter.CuckooConfig{Capacity: 100, FPRate: 0.01, MaxFilters: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{0, 1000} {
		for i := range n {
			key := []byte(fmt.Sprint("key", i))
			if err := s.Add(key); err != nil {
				t.Fatal(err)
			}
			if err := c.Add(key); err != nil && !errors.Is(err, filter.ErrFull) {
				t.Fatal(err)
			}
		}
		if b, st := s.Bytes(), s.Stats().Bytes; b != st || b == 0 {
			t.Errorf("after %d adds: Scalable.Bytes() = %d, Stats().Bytes = %d", n, b, st)
		}
		if b, st := c.Bytes(), c.Stats().Bytes; b != st || b == 0 {
			t.Errorf("after %d adds: Cuckoo.Bytes() = %d, Stats().Bytes = %d", n, b, st)
		}
	}
	if s.Filters() < 2 || len(c.FingerprintBits()) < 2 {
		t.Fatalf("did not grow: %d and %d sub-filters", s.Filters(), len(c.FingerprintBits()))
	}
}
