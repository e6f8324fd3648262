package bench

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/bloomgate/bloomgate/internal/cputime"
)

// The benchmark matrix. Keys and filters are built on first use and kept, so
// selecting a part with -bench (for example -bench 'Lookup.*/n=1M/') builds
// only what it needs.
//
//	cd bench && go test -run '^$' -bench . -count 6 | tee new.txt
//	benchstat -col /filter new.txt
//
// BLOOMGATE_BENCH_SIZES replaces the sizes, comma-separated (100000000 needs
// about 8 GB for its keys and four filters).
var (
	benchSizes = []int{1_000_000, 10_000_000}
	benchRates = []float64{0.01, 0.001}
)

// sizes returns BLOOMGATE_BENCH_SIZES, comma-separated, or benchSizes when
// it is unset; a malformed list fails the benchmark.
func sizes(b *testing.B) []int {
	const name = "BLOOMGATE_BENCH_SIZES"
	s := os.Getenv(name)
	if s == "" {
		return benchSizes
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 {
			b.Fatalf("%s=%q: want positive integers separated by commas", name, s)
		}
		out = append(out, n)
	}
	return out
}

var fixtures struct {
	sync.Mutex
	keys    map[int]*Keys
	filters map[string]Filter
}

func benchKeys(n int) *Keys {
	fixtures.Lock()
	defer fixtures.Unlock()
	if fixtures.keys == nil {
		fixtures.keys = map[int]*Keys{}
	}
	k, ok := fixtures.keys[n]
	if !ok {
		k = NewKeys(n, DefaultAbsent)
		fixtures.keys[n] = k
	}
	return k
}

func benchFilter(b *testing.B, c Contender, n int, p float64) Filter {
	keys := benchKeys(n)
	fixtures.Lock()
	defer fixtures.Unlock()
	if fixtures.filters == nil {
		fixtures.filters = map[string]Filter{}
	}
	id := fmt.Sprintf("%s/%d/%g", c.Name, n, p)
	f, ok := fixtures.filters[id]
	if !ok {
		var err error
		if f, err = c.Build(keys.Present, p); err != nil {
			b.Fatal(err)
		}
		fixtures.filters[id] = f
	}
	return f
}

// matrix runs fn as BenchmarkX/n=…/p=…/filter for every size, rate and
// contender. Static filters ignore p and run once per size, under their own
// fixed rate (p=0.0039 for binaryfuse8).
func matrix(b *testing.B, adds bool, fn func(b *testing.B, keys *Keys, f Filter)) {
	for _, n := range sizes(b) {
		b.Run("n="+fmtN(n), func(b *testing.B) {
			for _, p := range append(benchRates[:len(benchRates):len(benchRates)], 0) {
				for _, c := range Contenders() {
					if c.Static != (p == 0) || (adds && c.Static) {
						continue
					}
					label := fmt.Sprintf("p=%g", p)
					if c.Static {
						label = fmt.Sprintf("p=%.2g", math.Exp2(-8))
					}
					b.Run(label+"/"+c.Name, func(b *testing.B) {
						fn(b, benchKeys(n), benchFilter(b, c, n, p))
					})
				}
			}
		})
	}
}

func BenchmarkAdd(b *testing.B) {
	matrix(b, true, func(b *testing.B, keys *Keys, f Filter) {
		b.ReportAllocs()
		t := cputime.Start(b)
		f.BenchAdd(b, keys.Present)
		t.Stop()
	})
}

func BenchmarkLookupPresent(b *testing.B) {
	matrix(b, false, func(b *testing.B, keys *Keys, f Filter) {
		b.ReportAllocs()
		if hits := f.BenchLookup(b, keys.Present); hits != b.N {
			b.Fatalf("%d false negatives", b.N-hits)
		}
	})
}

// BenchmarkLookupAbsent also reports the filter's size and its false-positive
// rate measured on all the absent keys.
func BenchmarkLookupAbsent(b *testing.B) {
	matrix(b, false, func(b *testing.B, keys *Keys, f Filter) {
		b.ReportAllocs()
		t := cputime.Start(b)
		f.BenchLookup(b, keys.Absent)
		t.Stop()
		b.ReportMetric(float64(f.Bytes())*8/float64(len(keys.Present)), "bits/key")
		b.ReportMetric(float64(f.Count(keys.Absent))/float64(len(keys.Absent)), "FP")
	})
}

// BenchmarkLookupBatch looks up absent keys in batches of LookupBatch: one
// MayContainMany call per batch for bloomgate, a loop over the batch for the
// peers. One op is one key.
func BenchmarkLookupBatch(b *testing.B) {
	matrix(b, false, func(b *testing.B, keys *Keys, f Filter) {
		b.ReportAllocs()
		t := cputime.Start(b)
		f.BenchLookupBatch(b, keys.Absent)
		t.Stop()
	})
}

// BenchmarkLookupParallel looks up absent keys from Goroutines goroutines.
func BenchmarkLookupParallel(b *testing.B) {
	matrix(b, false, func(b *testing.B, keys *Keys, f Filter) {
		BenchParallel(b, f, keys.Absent, Goroutines)
	})
}

func BenchmarkEncode(b *testing.B) {
	matrix(b, false, func(b *testing.B, _ *Keys, f Filter) { BenchEncode(b, f) })
}

// BenchmarkDecode decodes from memory; its MB/s is decode throughput.
func BenchmarkDecode(b *testing.B) {
	matrix(b, false, func(b *testing.B, _ *Keys, f Filter) {
		var buf bytes.Buffer
		if err := f.Encode(&buf); err != nil {
			b.Fatal(err)
		}
		BenchDecode(b, f, buf.Bytes())
	})
}

// The family benchmarks: BenchmarkFamilyX/<family>[-<setting>]/n=…/<filter>,
// the filters of FamilyGroups at familySizes keys, for example
//
//	go test -run '^$' -bench 'Family.*/counting/n=1M/' -count 6
var familySizes = []int{1_000_000, 10_000_000}

var familyFixtures struct {
	sync.Mutex
	filters map[string]FamilyFilter
}

// familyLabel names a group in benchmark names: its family, and for a family
// measured in more than one setting, which ("cuckoo-p=0.1%", "cuckoo-p=3%").
func familyLabel(groups []FamilyGroup, i int) string {
	g, label := groups[i], groups[i].Family
	for j, h := range groups {
		if j != i && h.Family == g.Family {
			p, _, _ := strings.Cut(strings.TrimPrefix(g.Setting, "p "), ":")
			p = strings.NewReplacer("≈", "", " ", "", "=", "").Replace(p)
			return label + "-p=" + p
		}
	}
	return label
}

func familyMatrix(b *testing.B, fn func(b *testing.B, keys *Keys, f FamilyFilter)) {
	groups := FamilyGroups()
	for i, g := range groups {
		b.Run(familyLabel(groups, i), func(b *testing.B) {
			for _, n := range familySizes {
				b.Run("n="+fmtN(n), func(b *testing.B) {
					for _, m := range g.Members {
						b.Run(strings.NewReplacer("/", "-", " ", "-").Replace(m.Name), func(b *testing.B) {
							keys := benchKeys(n)
							id := fmt.Sprintf("%s/%s/%s/%d", g.Family, g.Setting, m.Name, n)
							familyFixtures.Lock()
							if familyFixtures.filters == nil {
								familyFixtures.filters = map[string]FamilyFilter{}
							}
							f, ok := familyFixtures.filters[id]
							if !ok {
								var err error
								if f, err = m.Build(keys.Present); err != nil {
									familyFixtures.Unlock()
									b.Fatal(err)
								}
								familyFixtures.filters[id] = f
							}
							familyFixtures.Unlock()
							fn(b, keys, f)
						})
					}
				})
			}
		})
	}
}

func BenchmarkFamilyAdd(b *testing.B) {
	familyMatrix(b, func(b *testing.B, keys *Keys, f FamilyFilter) {
		b.ReportAllocs()
		t := cputime.Start(b)
		f.BenchAdd(b, keys.Present)
		t.Stop()
	})
}

// BenchmarkFamilyLookupPresent reports false negatives as a metric: peers
// whose Add can fail may lose keys.
func BenchmarkFamilyLookupPresent(b *testing.B) {
	familyMatrix(b, func(b *testing.B, keys *Keys, f FamilyFilter) {
		b.ReportAllocs()
		f.BenchLookup(b, keys.Present)
		b.ReportMetric(float64(len(keys.Present)-f.Count(keys.Present)), "false-negatives")
	})
}

// BenchmarkFamilyLookupAbsent also reports the filter's size and its
// false-positive rate measured on all the absent keys.
func BenchmarkFamilyLookupAbsent(b *testing.B) {
	familyMatrix(b, func(b *testing.B, keys *Keys, f FamilyFilter) {
		b.ReportAllocs()
		t := cputime.Start(b)
		f.BenchLookup(b, keys.Absent)
		t.Stop()
		b.ReportMetric(float64(f.Bytes())*8/float64(len(keys.Present)), "bits/key")
		b.ReportMetric(float64(f.Count(keys.Absent))/float64(len(keys.Absent)), "FP")
	})
}

// BenchmarkFamilyRemove runs on the filters that can delete (counting,
// cuckoo); it skips the others.
func BenchmarkFamilyRemove(b *testing.B) {
	familyMatrix(b, func(b *testing.B, keys *Keys, f FamilyFilter) {
		rm, ok := f.(RemoveBencher)
		if !ok {
			b.Skip("cannot remove")
		}
		b.ReportAllocs()
		rm.BenchRemove(b, keys.Present)
	})
}
