package bench

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// Key namespaces: filtertest.Emails keys of different namespaces never
// collide, so absent keys are truly absent.
const (
	presentNamespace = 1
	absentNamespace  = 2
)

// DefaultAbsent is how many absent keys false positives are measured on (and
// absent lookups cycle through).
const DefaultAbsent = 2_000_000

// Keys are the keys of one comparison: Present go into the filters, Absent
// never do.
type Keys struct {
	Present [][]byte
	Absent  [][]byte
}

// NewKeys returns n present and absent absent e-mail-like keys.
func NewKeys(n, absent int) *Keys {
	return &Keys{
		Present: filtertest.Emails(n, presentNamespace),
		Absent:  filtertest.Emails(absent, absentNamespace),
	}
}

// Goroutines is how many goroutines BenchParallel looks up from.
const Goroutines = 2

// parallelChunk is how many keys a BenchParallel goroutine passes to Count at
// once; the interface call per chunk is negligible.
const parallelChunk = 4096

// BenchParallel times lookups of keys from goroutines goroutines at once, each
// starting at its own offset and cycling through keys. One op is one lookup:
// ns/op is wall time divided by the lookups of all goroutines together, and
// the metric Mlookups/s is their combined rate.
//
// It splits b.N between the goroutines instead of using b.Loop, which drives a
// single goroutine.
func BenchParallel(b *testing.B, f Filter, keys [][]byte, goroutines int) {
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for g := range goroutines {
		todo := b.N / goroutines
		if g < b.N%goroutines {
			todo++
		}
		wg.Go(func() {
			off := g * len(keys) / goroutines
			for todo > 0 {
				c := min(todo, parallelChunk, len(keys)-off)
				f.Count(keys[off : off+c])
				todo -= c
				if off += c; off == len(keys) {
					off = 0
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds()/1e6, "Mlookups/s")
}

// BenchEncode times encoding f into a reused in-memory buffer.
func BenchEncode(b *testing.B, f Filter) {
	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(buf.Len()))
	b.ReportAllocs()
	for b.Loop() {
		buf.Reset()
		if err := f.Encode(&buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchDecode times decoding enc, from memory, into a new filter.
func BenchDecode(b *testing.B, f Filter, enc []byte) {
	b.SetBytes(int64(len(enc)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
}

// Config configures Run.
type Config struct {
	// N lists the key counts. Required.
	N []int
	// P lists the target false-positive rates. Required.
	P []float64
	// Absent is how many absent keys FP rates are measured on.
	// Default (zero): DefaultAbsent.
	Absent int
	// BenchTime is how long each measurement runs (testing's -benchtime).
	// Default (zero): 1s.
	BenchTime time.Duration
	// Count is how many rounds of timings to take; rows report the median.
	// Default (zero): 1.
	Count int
	// Contenders are the filters compared. Default (nil): Contenders().
	Contenders []Contender
	// Progress, if not nil, receives a line per measurement.
	Progress io.Writer
}

// Row is what Run measured for one filter at one (n, p). Times not
// applicable (Add on a static filter) are NaN.
type Row struct {
	Filter string
	Static bool
	N      int
	// P is the target false-positive rate; for a static filter, the rate
	// its structure gives (2^-8 for binaryfuse8).
	P float64

	AddNs        float64 // ns per Add of a new key
	PresentNs    float64 // ns per lookup of a present key
	AbsentNs     float64 // ns per lookup of an absent key
	BatchNs      float64 // ns per absent key, looked up in batches of LookupBatch (BenchLookupBatch)
	ParallelMops float64 // absent-key lookups per µs on Goroutines goroutines
	Bytes        int     // memory of the filter's table
	BitsPerKey   float64 // Bytes·8 / N
	FP           float64 // measured false-positive rate on the absent keys
	FPCount      int     // absent keys reported present
	Absent       int     // absent keys tried
	EncodeMs     float64
	DecodeMs     float64
	EncodedBytes int
	BuildNsKey   float64 // build time per key (hashing included), the median over the rounds
}

// BuildSeconds is the time to build the filter from all N keys.
func (r Row) BuildSeconds() float64 { return r.BuildNsKey * float64(r.N) / 1e9 }

// DecodeGBps returns decode throughput in GB/s (10^9 bytes per second).
func (r Row) DecodeGBps() float64 { return float64(r.EncodedBytes) / (r.DecodeMs * 1e6) }

// Run measures every contender at every (n, p), using testing.Benchmark. Each
// filter is built once per (n, p) and reused for its lookups; static filters
// are built once per n.
func Run(cfg Config) ([]Row, error) {
	if len(cfg.N) == 0 || len(cfg.P) == 0 {
		return nil, errors.New("bench: Config.N and Config.P are required")
	}
	for _, p := range cfg.P {
		if !(p > 0 && p < 1) {
			return nil, fmt.Errorf("bench: false-positive rate %v outside (0, 1)", p)
		}
	}
	for _, n := range cfg.N {
		if n <= 0 {
			return nil, fmt.Errorf("bench: key count %d must be > 0", n)
		}
	}
	if cfg.Absent == 0 {
		cfg.Absent = DefaultAbsent
	}
	cfg.Count = max(cfg.Count, 1)
	if cfg.Contenders == nil {
		cfg.Contenders = Contenders()
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	restore, err := setBenchTime(cfg.BenchTime)
	if err != nil {
		return nil, err
	}
	defer restore()

	var rows []Row
	for _, n := range cfg.N {
		start := time.Now()
		keys := NewKeys(n, cfg.Absent)
		fmt.Fprintf(cfg.Progress, "n=%d: %d present + %d absent keys in %v\n", n, n, cfg.Absent, time.Since(start).Round(time.Millisecond))
		// Rows in table order: by p, then the static filters, which ignore p.
		for _, p := range slices.Concat(cfg.P, []float64{0}) {
			var group []*subject
			for _, c := range cfg.Contenders {
				if c.Static != (p == 0) {
					continue
				}
				s, err := prepare(c, keys, p)
				if err != nil {
					return nil, fmt.Errorf("%s n=%d p=%g: %w", c.Name, n, p, err)
				}
				group = append(group, s)
			}
			// Rounds visit every filter of the group in turn, so a slow
			// spell of the machine hits them alike; rows keep the medians.
			for range cfg.Count {
				for _, s := range group {
					s.time(cfg.Progress, keys)
				}
			}
			for _, s := range group {
				rows = append(rows, s.result())
			}
		}
	}
	return rows, nil
}

// A subject is one built filter being measured.
type subject struct {
	row Row
	c   Contender
	f   Filter
	enc []byte
	// Samples of ns/op per round (build: ns per key; its first sample is
	// the build in prepare).
	add, present, absent, batch, parallel, encode, decode, build []float64
}

// prepare builds c's filter for keys at rate p and takes the measurements
// that need no timing loop: false negatives (none allowed), false positives,
// size, and an encode/decode round trip.
func prepare(c Contender, keys *Keys, p float64) (*subject, error) {
	n := len(keys.Present)
	r := Row{Filter: c.Name, Static: c.Static, N: n, P: p, Absent: len(keys.Absent)}
	if c.Static {
		r.P = math.Exp2(-8)
	}
	start := time.Now()
	f, err := c.Build(keys.Present, p)
	if err != nil {
		return nil, err
	}
	build := float64(time.Since(start).Nanoseconds()) / float64(n)
	if got := f.Count(keys.Present); got != n {
		return nil, fmt.Errorf("%d false negatives", n-got)
	}
	r.FPCount = f.Count(keys.Absent)
	r.FP = float64(r.FPCount) / float64(len(keys.Absent))
	r.Bytes = f.Bytes()
	r.BitsPerKey = float64(r.Bytes) * 8 / float64(n)

	var buf bytes.Buffer
	if err := f.Encode(&buf); err != nil {
		return nil, fmt.Errorf("encode: %w", err)
	}
	enc := buf.Bytes()
	r.EncodedBytes = len(enc)
	g, err := f.Decode(enc)
	if err != nil {
		return nil, fmt.Errorf("decode: %w", err)
	}
	sample := keys.Present[:min(n, 100_000)]
	if got := g.Count(sample); got != len(sample) {
		return nil, fmt.Errorf("decoded filter: %d false negatives in %d keys", len(sample)-got, len(sample))
	}
	return &subject{row: r, c: c, f: f, enc: enc, build: []float64{build}}, nil
}

// time runs one round of the timed measurements.
func (s *subject) time(progress io.Writer, keys *Keys) {
	f, r := s.f, &s.row
	bench := func(what string, samples *[]float64, fn func(b *testing.B)) {
		res := testing.Benchmark(fn) // collects garbage first
		ns := float64(res.T.Nanoseconds()) / float64(max(res.N, 1))
		fmt.Fprintf(progress, "%-16s n=%-9d p=%-10.4g %-9s %12.1f ns/op  (%d ops)\n", r.Filter, r.N, r.P, what, ns, res.N)
		*samples = append(*samples, ns)
	}
	if !r.Static {
		bench("add", &s.add, func(b *testing.B) { f.BenchAdd(b, keys.Present) })
	}
	bench("present", &s.present, func(b *testing.B) { f.BenchLookup(b, keys.Present) })
	bench("absent", &s.absent, func(b *testing.B) { f.BenchLookup(b, keys.Absent) })
	bench("batch", &s.batch, func(b *testing.B) { f.BenchLookupBatch(b, keys.Absent) })
	bench("parallel", &s.parallel, func(b *testing.B) { BenchParallel(b, f, keys.Absent, Goroutines) })
	bench("encode", &s.encode, func(b *testing.B) { BenchEncode(b, f) })
	bench("decode", &s.decode, func(b *testing.B) { BenchDecode(b, f, s.enc) })
	if len(s.build) < len(s.add) || len(s.build) < len(s.absent) {
		runtime.GC() // as testing.Benchmark does
		start := time.Now()
		if _, err := s.c.Build(keys.Present, r.P); err == nil {
			ns := float64(time.Since(start).Nanoseconds()) / float64(r.N)
			fmt.Fprintf(progress, "%-16s n=%-9d p=%-10.4g %-9s %12.3f s\n", r.Filter, r.N, r.P, "build", ns*float64(r.N)/1e9)
			s.build = append(s.build, ns)
		}
	}
}

// result returns the row with the median of each timing.
func (s *subject) result() Row {
	r := s.row
	r.AddNs = median(s.add)
	r.PresentNs = median(s.present)
	r.AbsentNs = median(s.absent)
	r.BatchNs = median(s.batch)
	r.BuildNsKey = median(s.build)
	r.ParallelMops = 1e3 / median(s.parallel)
	r.EncodeMs = median(s.encode) / 1e6
	r.DecodeMs = median(s.decode) / 1e6
	return r
}

// median returns the median of xs, NaN if there are none.
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	xs = slices.Sorted(slices.Values(xs))
	m := len(xs) / 2
	if len(xs)%2 == 0 {
		return (xs[m-1] + xs[m]) / 2
	}
	return xs[m]
}

// setBenchTime sets testing's -test.benchtime, which testing.Benchmark reads,
// and returns a function that restores it.
func setBenchTime(d time.Duration) (restore func(), err error) {
	if d == 0 {
		return func() {}, nil
	}
	testing.Init() // registers the test.* flags outside go test; no-op inside
	fl := flag.Lookup("test.benchtime")
	if fl == nil {
		return nil, errors.New("bench: flag test.benchtime not registered")
	}
	old := fl.Value.String()
	if err := fl.Value.Set(d.String()); err != nil {
		return nil, err
	}
	return func() { fl.Value.Set(old) }, nil
}
