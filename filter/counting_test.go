package filter_test

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

func TestCountingConformance(t *testing.T) {
	filtertest.Run(t, filtertest.Factory{
		New: func(n uint64, p float64) (filter.Filter, error) {
			return filter.NewCounting(filter.CountingConfig{Capacity: n, FPRate: p, Seed: 42})
		},
		Decode: func(r io.Reader) (filter.Filter, error) {
			return filter.DecodeCounting(r, filter.DecodeConfig{})
		},
		Large: !raceEnabled,
	})
}

func TestNewCountingInvalid(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  filter.CountingConfig
		want error
	}{
		{"zero capacity", filter.CountingConfig{}, filter.ErrInvalidParams},
		{"rate one", filter.CountingConfig{Capacity: 10, FPRate: 1}, filter.ErrInvalidParams},
		{"negative rate", filter.CountingConfig{Capacity: 10, FPRate: -0.1}, filter.ErrInvalidParams},
		{"NaN rate", filter.CountingConfig{Capacity: 10, FPRate: math.NaN()}, filter.ErrInvalidParams},
		{"rate too small", filter.CountingConfig{Capacity: 10, FPRate: 1e-15}, filter.ErrInvalidParams},
		{"too large", filter.CountingConfig{Capacity: 1e15, FPRate: 0.001}, filter.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if f, err := filter.NewCounting(tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("NewCounting(%+v) = %v, %v; want %v", tc.cfg, f, err, tc.want)
			}
		})
	}
}

func TestCountingRemove(t *testing.T) {
	const n, p = 20_000, 0.01
	f, err := filter.NewCounting(filter.CountingConfig{Capacity: n, FPRate: p})
	if err != nil {
		t.Fatal(err)
	}
	keys := filtertest.Emails(n, 1)
	for _, k := range keys {
		f.Add(k)
	}
	kept, removed := keys[:n/2], keys[n/2:]
	for i, k := range removed {
		var err error
		if i%2 == 0 {
			err = f.Remove(k)
		} else {
			err = f.RemoveString(string(k))
		}
		if err != nil {
			t.Fatalf("Remove(%q): %v", k, err)
		}
	}
	filtertest.CheckPresent(t, f, kept)
	// Removed keys are now absent but for false positives, at the rate of a
	// filter holding n/2 keys.
	if got, limit := filtertest.MeasureFP(f, removed), filtertest.FPBound(len(removed), p); got > limit {
		t.Fatalf("%d of %d removed keys still reported present (limit %d)", got, len(removed), limit)
	}
	if s := f.Stats(); s.Items != n/2 || s.RemoveMisses != 0 {
		t.Fatalf("after removing half: %+v", s)
	}
	// Removing everything empties the table.
	for _, k := range kept {
		if err := f.Remove(k); err != nil {
			t.Fatal(err)
		}
	}
	if s := f.Stats(); s.Items != 0 || s.FillRatio != 0 || s.EstimatedFPRate != 0 {
		t.Fatalf("after removing all: %+v", s)
	}
}

func TestCountingRemoveMiss(t *testing.T) {
	f, _ := filter.NewCounting(filter.CountingConfig{Capacity: 1000, FPRate: 0.001})
	keys := filtertest.Emails(1000, 2)
	for _, k := range keys {
		f.Add(k)
	}
	var before bytes.Buffer
	f.WriteTo(&before)
	misses := 0
	for _, k := range filtertest.Emails(1000, 3) {
		if f.MayContain(k) {
			continue // a false positive: removing it is the caller's error
		}
		misses++
		if err := f.Remove(k); !errors.Is(err, filter.ErrNotFound) {
			t.Fatalf("Remove of an absent key: %v, want ErrNotFound", err)
		}
	}
	s := f.Stats()
	if s.RemoveMisses != uint64(misses) || s.Items != 1000 {
		t.Fatalf("RemoveMisses = %d, Items = %d; want %d, 1000", s.RemoveMisses, s.Items, misses)
	}
	// Nothing was decremented: the table is unchanged.
	var after bytes.Buffer
	f.WriteTo(&after)
	table := func(b []byte) []byte { return b[20+48+8 : len(b)-4] }
	if !bytes.Equal(table(before.Bytes()), table(after.Bytes())) {
		t.Fatal("a missed Remove changed the counters")
	}
	filtertest.CheckPresent(t, f, keys)
}

func TestCountingDuplicates(t *testing.T) {
	f, _ := filter.NewCounting(filter.CountingConfig{Capacity: 100})
	k := []byte("twice@example.com")
	f.Add(k)
	f.Add(k)
	if err := f.Remove(k); err != nil || !f.MayContain(k) {
		t.Fatalf("after two adds and one remove: %v, present %v", err, f.MayContain(k))
	}
	if err := f.Remove(k); err != nil || f.MayContain(k) {
		t.Fatalf("after two adds and two removes: %v, present %v", err, f.MayContain(k))
	}
	if err := f.Remove(k); !errors.Is(err, filter.ErrNotFound) {
		t.Fatalf("third remove: %v", err)
	}
}

// TestCountingSaturation: a counter that reached 15 stays there, so a key
// added 16 times or more is never removed from the table — no false
// negatives for keys sharing its counters.
func TestCountingSaturation(t *testing.T) {
	f, _ := filter.NewCounting(filter.CountingConfig{Capacity: 100})
	hot, other := []byte("hot@example.com"), []byte("other@example.com")
	for range 40 {
		f.Add(hot)
	}
	f.Add(other)
	for range 40 {
		if err := f.Remove(hot); err != nil {
			t.Fatalf("Remove of a saturated key: %v", err)
		}
	}
	if !f.MayContain(hot) || !f.MayContain(other) {
		t.Fatal("saturated counters were decremented")
	}
	if err := f.Remove(other); err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.Items != 0 || s.FillRatio == 0 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestCountingConcurrent adds, removes and looks up from several goroutines:
// a key whose Add returned and whose Remove has not started is never reported
// absent, while other goroutines' removes change the counters it shares.
func TestCountingConcurrent(t *testing.T) {
	const workers, perWorker, live = 4, 20_000, 2000
	f, _ := filter.NewCounting(filter.CountingConfig{Capacity: workers * live, FPRate: 0.01})
	keys := make([][][]byte, workers)
	lo := make([]atomic.Int64, workers) // keys [lo, hi) are acknowledged and not removed
	hi := make([]atomic.Int64, workers)
	for w := range keys {
		keys[w] = filtertest.Emails(perWorker, 300+uint64(w))
	}
	var wg, rg sync.WaitGroup
	var missing atomic.Int64
	done := make(chan struct{})
	for w := range workers {
		wg.Go(func() {
			for i, k := range keys[w] {
				f.Add(k)
				hi[w].Store(int64(i + 1))
				if i >= live {
					j := lo[w].Add(1) - 1 // stop readers checking it first
					if err := f.Remove(keys[w][j]); err != nil {
						t.Errorf("Remove: %v", err)
						return
					}
				}
			}
		})
		rg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				l, h := lo[w].Load(), hi[w].Load()
				for j := l; j < h; j++ {
					if !f.MayContain(keys[w][j]) && j >= lo[w].Load() {
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
		t.Fatalf("%d acknowledged, unremoved keys reported absent", n)
	}
	for w := range workers {
		filtertest.CheckPresent(t, f, keys[w][lo[w].Load():])
	}
	if s := f.Stats(); s.Items != workers*live || s.RemoveMisses != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestCountingAllocs(t *testing.T) {
	f, _ := filter.NewCounting(filter.CountingConfig{Capacity: 1000})
	key, skey := []byte("someone@example.com"), "someone@example.com"
	absent := []byte("nobody@example.com")
	for name, fn := range map[string]func(){
		"Add":              func() { f.Add(key) },
		"AddString":        func() { f.AddString(skey) },
		"MayContain":       func() { f.MayContain(key) },
		"MayContainString": func() { f.MayContainString(skey) },
		"Add+Remove":       func() { f.Add(absent); f.Remove(absent) },
		"RemoveString":     func() { f.AddString(skey); f.RemoveString(skey) },
		"Remove miss":      func() { f.Remove(absent) },
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

func TestCountingStats(t *testing.T) {
	const n = 100_000
	f, _ := filter.NewCounting(filter.CountingConfig{Capacity: n, FPRate: 0.01})
	keys := filtertest.Emails(n, 4)
	for _, k := range keys {
		f.Add(k)
	}
	s := f.Stats()
	if d := s.EstimatedDistinct; math.Abs(d-n)/n > 0.02 {
		t.Errorf("EstimatedDistinct = %.0f, want %d ± 2%%", d, n)
	}
	if s.FillRatio < 0.4 || s.FillRatio > 0.6 {
		t.Errorf("FillRatio = %.3f", s.FillRatio)
	}
	// Four bits per slot; slots per key as a blocked Bloom filter with
	// 256-slot blocks needs (about 10.2 at 1 %).
	if bpk := float64(s.Bits) / 4 / n; s.Bits != s.Bytes*8 || bpk < 9.59 || bpk > 10.4 {
		t.Errorf("%.2f slots per key, stats %+v", bpk, s)
	}
	const q = 200_000
	measured := float64(filtertest.MeasureFP(f, filtertest.Emails(q, 5))) / q
	if math.Abs(s.EstimatedFPRate-measured)/measured > 0.2 {
		t.Errorf("EstimatedFPRate = %.5f, measured %.5f", s.EstimatedFPRate, measured)
	}
	t.Logf("%.2f bits/key, k=%d, measured FP %.5f, estimated %.5f", float64(s.Bits)/n, s.K, measured, s.EstimatedFPRate)
}

func goldenCounting(t testing.TB) *filter.Counting {
	f, err := filter.NewCounting(filter.CountingConfig{Capacity: 20, FPRate: 0.01, Seed: 0x0123456789abcdef})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"alice@example.com", "bob@example.com", "carol@example.com", "carol@example.com", "dave@example.com"} {
		f.AddString(k)
	}
	if err := f.RemoveString("dave@example.com"); err != nil {
		t.Fatal(err)
	}
	f.RemoveString("mallory@example.com") // a miss, counted
	return f
}

func TestCountingGolden(t *testing.T) {
	var buf bytes.Buffer
	if _, err := goldenCounting(t).WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	want := checkGolden(t, "counting.golden", buf.Bytes())
	for _, f := range decodeGolden(t, want, func(r io.Reader) (filter.Filter, error) { return filter.DecodeCounting(r, filter.DecodeConfig{}) }, []string{"alice@example.com", "bob@example.com", "carol@example.com"}) {
		if s := f.Stats(); s.Kind != filter.KindCounting || s.Items != 4 || s.RemoveMisses != 1 {
			t.Fatalf("golden stats: %+v", s)
		}
		// Carol was added twice: one Remove leaves her present.
		r := f.(*filter.Counting)
		if err := r.RemoveString("carol@example.com"); err != nil || !f.MayContainString("carol@example.com") {
			t.Fatalf("carol after one remove: %v", err)
		}
	}
}

func TestDecodeCountingErrors(t *testing.T) {
	var buf bytes.Buffer
	goldenCounting(t).WriteTo(&buf)
	enc := buf.Bytes()
	patch := func(off int, b ...byte) []byte {
		c := bytes.Clone(enc)
		copy(c[off:], b)
		return c
	}
	const params = 20
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
		{"zero capacity", patch(params, 0, 0, 0, 0, 0, 0, 0, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"rate zero", patch(params+8, 0, 0, 0, 0, 0, 0, 0, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero blocks", patch(params+16, 0, 0, 0, 0, 0, 0, 0, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"2^40 blocks", patch(params+16, 0, 0, 0, 0, 0, 1, 0, 0), filter.DecodeConfig{}, filter.ErrTooLarge},
		{"zero probes", patch(params+24, 0), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"33 probes", patch(params+24, 33), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"reserved", patch(params+28, 1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"items 2^63", patch(params+32, 0, 0, 0, 0, 0, 0, 0, 0x80), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"payload length", patch(params+48, enc[params+48]+8), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"over MaxBytes", enc, filter.DecodeConfig{MaxBytes: 64}, filter.ErrTooLarge},
		{"checksum", patch(len(enc)-1, enc[len(enc)-1]^1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"counter", patch(len(enc)-5, enc[len(enc)-5]^1), filter.DecodeConfig{}, filter.ErrCorrupt},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := filter.DecodeCounting(bytes.NewReader(tc.in), tc.cfg); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// FuzzDecodeCounting feeds arbitrary bytes to the Counting decoder: it must
// return a filter or an error, never panic nor allocate more than the input
// holds, and a filter it returns must re-encode to the bytes it read and
// support Add and Remove.
func FuzzDecodeCounting(f *testing.F) {
	var buf bytes.Buffer
	goldenCounting(f).WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Add(buf.Bytes()[:40])
	big, _ := filter.NewCounting(filter.CountingConfig{Capacity: 2000, FPRate: 0.001})
	for _, k := range filtertest.Emails(1500, 9) {
		big.Add(k)
	}
	buf.Reset()
	big.WriteTo(&buf)
	f.Add(buf.Bytes())
	f.Fuzz(func(t *testing.T, in []byte) {
		fuzzCounting(t, in)
		in = bytes.Clone(in)
		reseal(in) // reach the checks behind the checksum
		fuzzCounting(t, in)
	})
}

// fuzzCounting checks one input: see the fuzz target.
func fuzzCounting(t *testing.T, in []byte) {
	cfg := filter.DecodeConfig{MaxBytes: 1 << 20}
	flt, err := filter.DecodeCounting(bytes.NewReader(in), cfg)
	checkDecodeAgrees(t, in, cfg, err)
	if err == nil {
		checkDecoded(t, in, flt)
	}
}

func ExampleCounting() {
	f, err := filter.NewCounting(filter.CountingConfig{Capacity: 1_000_000, FPRate: 0.001})
	if err != nil {
		panic(err)
	}
	f.AddString("alice@example.com")
	fmt.Println(f.MayContainString("alice@example.com"))
	f.RemoveString("alice@example.com")
	fmt.Println(f.MayContainString("alice@example.com"))
	err = f.RemoveString("mallory@example.com")
	fmt.Println(errors.Is(err, filter.ErrNotFound), f.Stats().RemoveMisses)
	// Output:
	// true
	// false
	// true 1
}

func BenchmarkCounting(b *testing.B) {
	for _, n := range []int{1_000_000, 10_000_000} {
		for _, p := range []float64{0.01, 0.001} {
			b.Run(fmt.Sprintf("n=%d/p=%g", n, p), func(b *testing.B) { benchCounting(b, n, p) })
		}
	}
}

func benchCounting(b *testing.B, n int, p float64) {
	present := filtertest.Emails(n, 1)
	absent := filtertest.Emails(1<<16, 2)
	cfg := filter.CountingConfig{Capacity: uint64(n), FPRate: p}
	f, err := filter.NewCounting(cfg)
	if err != nil {
		b.Fatal(err)
	}
	for _, k := range present {
		f.Add(k)
	}
	filtertest.BenchCore(b, filtertest.Bench{Full: f, Present: present, Absent: absent, NewAdd: func() func([]byte) {
		g, _ := filter.NewCounting(cfg)
		return func(k []byte) { g.Add(k) }
	}})
	b.Run("Remove", func(b *testing.B) {
		// Removes every key in turn; once all are gone, adds them back
		// with the timer stopped.
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if i == n {
				b.StopTimer()
				for _, k := range present {
					f.Add(k)
				}
				b.StartTimer()
				i = 0
			}
			if err := f.Remove(present[i]); err != nil {
				b.Fatal(err)
			}
			i++
		}
		b.StopTimer()
		for _, k := range present[:i] {
			f.Add(k)
		}
	})
}
