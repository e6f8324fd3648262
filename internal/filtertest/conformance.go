package filtertest

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
)

// Factory builds the filter under test.
type Factory struct {
	// New returns an empty filter sized for capacity keys at rate fp.
	New func(capacity uint64, fp float64) (filter.Filter, error)
	// Decode reads what the filter's WriteTo wrote.
	Decode func(r io.Reader) (filter.Filter, error)
	// Add, AddString and AddHash add a key to a filter New or Decode
	// returned, so that it stays present for the rest of the test; nil
	// means the filter's own method of that name (Bloom, Scalable,
	// Counting, Cuckoo). A family whose adds take more, such as Windowed's
	// expiry, supplies its own.
	Add       func(f filter.Filter, key []byte) error
	AddString func(f filter.Filter, key string) error
	AddHash   func(f filter.Filter, h uint64) error
	// FPSlack multiplies the target rate in the false-positive check, for
	// families whose guarantee is a bound rather than the rate itself
	// (default 1).
	FPSlack float64
	// Large enables the n = 1 M false-positive checks (slower under -race).
	Large bool
}

// Adder is what the Factory's default Add, AddString and AddHash call: the
// methods of the families that keep keys for the filter's whole life.
type Adder interface {
	Add(key []byte) error
	AddString(key string) error
	AddHash(h uint64) error
}

// Run runs the conformance suite.
func Run(t *testing.T, f Factory) {
	if f.FPSlack == 0 {
		f.FPSlack = 1
	}
	if f.Add == nil || f.AddString == nil || f.AddHash == nil {
		if flt := mustNew(t, f, 1, 0.01); !isAdder(flt) {
			t.Fatalf("%T has no Add(key []byte) error; the Factory must supply Add, AddString and AddHash", flt)
		}
	}
	if f.Add == nil {
		f.Add = func(flt filter.Filter, key []byte) error { return flt.(Adder).Add(key) }
	}
	if f.AddString == nil {
		f.AddString = func(flt filter.Filter, key string) error { return flt.(Adder).AddString(key) }
	}
	if f.AddHash == nil {
		f.AddHash = func(flt filter.Filter, h uint64) error { return flt.(Adder).AddHash(h) }
	}
	t.Run("NoFalseNegatives", func(t *testing.T) { t.Parallel(); noFalseNegatives(t, f) })
	t.Run("FPRate", func(t *testing.T) { t.Parallel(); fpRate(t, f) })
	t.Run("RoundTrip", func(t *testing.T) { t.Parallel(); roundTrip(t, f) })
	t.Run("Concurrent", func(t *testing.T) { t.Parallel(); concurrent(t, f) })
	t.Run("DecodeDamaged", func(t *testing.T) { t.Parallel(); decodeDamaged(t, f) })
}

func isAdder(flt filter.Filter) bool { _, ok := flt.(Adder); return ok }

func mustNew(t *testing.T, f Factory, n uint64, p float64) filter.Filter {
	t.Helper()
	flt, err := f.New(n, p)
	if err != nil {
		t.Fatalf("New(%d, %g): %v", n, p, err)
	}
	return flt
}

// addAll adds keys through Add, AddString and AddHash in turn, and checks
// that Items counts every add.
func addAll(t *testing.T, f Factory, flt filter.Filter, keys [][]byte) {
	t.Helper()
	before := flt.Items()
	for i, k := range keys {
		var err error
		switch i % 3 {
		case 0:
			err = f.Add(flt, k)
		case 1:
			err = f.AddString(flt, string(k))
		default:
			err = f.AddHash(flt, flt.Hash(k))
		}
		if err != nil {
			t.Fatalf("Add(%q) #%d: %v", k, i, err)
		}
	}
	if got, want := flt.Items(), before+uint64(len(keys)); got != want {
		t.Fatalf("Items() = %d after %d adds, want %d", got, len(keys), want)
	}
	checkSizes(t, flt)
}

// checkSizes checks that the cheap Items and Bytes agree with Stats.
func checkSizes(t *testing.T, flt filter.Filter) {
	t.Helper()
	s := flt.Stats()
	if flt.Items() != s.Items || flt.Bytes() != s.Bytes {
		t.Fatalf("Items() = %d, Bytes() = %d; Stats has %d and %d", flt.Items(), flt.Bytes(), s.Items, s.Bytes)
	}
}

// CheckPresent fails t for every key flt reports absent, by key, by string
// and by hash.
func CheckPresent(t testing.TB, flt filter.Filter, keys [][]byte) {
	t.Helper()
	bad := 0
	for _, k := range keys {
		if !flt.MayContain(k) || !flt.MayContainString(string(k)) || !flt.MayContainHash(flt.Hash(k)) {
			if bad++; bad <= 5 {
				t.Errorf("false negative: %q", k)
			}
		}
	}
	if bad > 0 {
		t.Fatalf("%d false negatives out of %d keys", bad, len(keys))
	}
}

func noFalseNegatives(t *testing.T, f Factory) {
	for _, tc := range []struct {
		n  int
		fp float64
	}{{1, 0.01}, {7, 0.5}, {100, 0.01}, {1000, 0.001}, {20000, 0.05}, {50000, 0.0001}} {
		for seed := uint64(1); seed <= 3; seed++ {
			flt := mustNew(t, f, uint64(tc.n), tc.fp)
			keys := Emails(tc.n, seed*1000+uint64(tc.n))
			addAll(t, f, flt, keys)
			CheckPresent(t, flt, keys)
		}
	}
}

// FPBound is the most false positives allowed in q lookups of absent keys
// when the rate must not exceed p: q·p plus four standard deviations, so a
// filter at exactly its target fails with probability < 1e-4.
func FPBound(q int, p float64) int {
	mean := float64(q) * p
	return int(math.Ceil(mean + 4*math.Sqrt(mean*(1-p)) + 1))
}

// MeasureFP counts how many of the absent keys flt reports present.
func MeasureFP(flt filter.Filter, absent [][]byte) int {
	fp := 0
	for _, k := range absent {
		if flt.MayContain(k) {
			fp++
		}
	}
	return fp
}

func fpRate(t *testing.T, f Factory) {
	cases := []struct {
		n  int
		fp float64
	}{{10000, 0.01}, {10000, 0.001}, {100000, 0.01}}
	if f.Large && !testing.Short() {
		cases = append(cases, struct {
			n  int
			fp float64
		}{1_000_000, 0.01}, struct {
			n  int
			fp float64
		}{1_000_000, 0.001})
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("n=%d/p=%g", tc.n, tc.fp), func(t *testing.T) {
			flt := mustNew(t, f, uint64(tc.n), tc.fp)
			addAll(t, f, flt, Emails(tc.n, 7))
			q := max(1_000_000, int(200/tc.fp))
			if !f.Large || testing.Short() {
				q = int(100 / tc.fp * 4)
			}
			got := MeasureFP(flt, Emails(q, 8))
			limit := FPBound(q, tc.fp*f.FPSlack)
			t.Logf("measured FP %d/%d = %.5f (target %g, limit %d, estimated %.5f)",
				got, q, float64(got)/float64(q), tc.fp, limit, flt.Stats().EstimatedFPRate)
			if got > limit {
				t.Fatalf("measured FP %d/%d = %.5f exceeds target %g (limit %d)", got, q, float64(got)/float64(q), tc.fp, limit)
			}
		})
	}
}

func roundTrip(t *testing.T, f Factory) {
	flt := mustNew(t, f, 5000, 0.01)
	keys := Emails(4000, 11)
	addAll(t, f, flt, keys)
	var buf bytes.Buffer
	n, err := flt.WriteTo(&buf)
	if err != nil {
		t.Fatalf("WriteTo: %v", err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("WriteTo returned %d, wrote %d", n, buf.Len())
	}
	got, err := f.Decode(bytes.NewReader(buf.Bytes()))
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	CheckPresent(t, got, keys)
	for _, k := range Emails(20000, 12) {
		if got.MayContain(k) != flt.MayContain(k) {
			t.Fatalf("decoded filter answers %q differently", k)
		}
	}
	if a, b := flt.Stats(), got.Stats(); a != b {
		t.Fatalf("stats differ after round trip:\n%+v\n%+v", a, b)
	}
	if got.Seed() != flt.Seed() || got.Hash(keys[0]) != flt.Hash(keys[0]) {
		t.Fatalf("seed %d after round trip, was %d", got.Seed(), flt.Seed())
	}
	checkSizes(t, got)
	var again bytes.Buffer
	if _, err := got.WriteTo(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), again.Bytes()) {
		t.Fatal("re-encoding a decoded filter changed its bytes")
	}
}

// concurrent runs writers and readers together; readers check every key a
// writer has acknowledged (Add returned) so far.
func concurrent(t *testing.T, f Factory) {
	const writers, readers, perWriter = 2, 2, 5000
	flt := mustNew(t, f, writers*perWriter, 0.01)
	keys := make([][][]byte, writers)
	acked := make([]atomic.Int64, writers)
	for w := range keys {
		keys[w] = Emails(perWriter, 100+uint64(w))
	}
	var wg sync.WaitGroup
	var failures atomic.Int64
	done := make(chan struct{})
	for w := range writers {
		wg.Go(func() {
			for i, k := range keys[w] {
				if err := f.Add(flt, k); err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				acked[w].Store(int64(i + 1))
			}
		})
	}
	var rg sync.WaitGroup
	for r := range readers {
		rg.Go(func() {
			for pass := 0; ; pass++ {
				select {
				case <-done:
					return
				default:
				}
				w := (r + pass) % writers
				n := acked[w].Load()
				for _, k := range keys[w][:n] {
					if !flt.MayContain(k) {
						failures.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	close(done)
	rg.Wait()
	if n := failures.Load(); n > 0 {
		t.Fatalf("%d false negatives for acknowledged keys under concurrency", n)
	}
	for w := range writers {
		CheckPresent(t, flt, keys[w])
	}
}

func decodeDamaged(t *testing.T, f Factory) {
	flt := mustNew(t, f, 200, 0.01)
	addAll(t, f, flt, Emails(150, 21))
	var buf bytes.Buffer
	if _, err := flt.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	enc := buf.Bytes()
	// Both the Factory's decoder and the generic filter.Decode must refuse
	// the input, and filter.Decode must return a nil Filter with its error.
	refused := func(in []byte) (error, error) {
		_, err := f.Decode(bytes.NewReader(in))
		got, gerr := filter.Decode(bytes.NewReader(in), filter.DecodeConfig{})
		if gerr != nil && got != nil {
			t.Fatalf("filter.Decode returned a non-nil %T with error %v", got, gerr)
		}
		return err, gerr
	}
	for i := range len(enc) {
		if err, gerr := refused(enc[:i]); !errors.Is(err, filter.ErrCorrupt) || !errors.Is(gerr, filter.ErrCorrupt) {
			t.Fatalf("truncated to %d of %d bytes: got %v and %v, want ErrCorrupt", i, len(enc), err, gerr)
		}
	}
	for i := range len(enc) {
		bad := bytes.Clone(enc)
		bad[i] ^= 0x10
		if err, gerr := refused(bad); err == nil || gerr == nil {
			t.Fatalf("flipping a bit in byte %d of %d went unnoticed (%v, %v)", i, len(enc), err, gerr)
		}
	}
}
