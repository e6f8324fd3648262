package bench

import (
	"fmt"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	linvon "github.com/linvon/cuckoo-filter"
	seiflotfy "github.com/seiflotfy/cuckoofilter"
	boom "github.com/tylertreat/BoomFilters"
)

// The other filter families (Scalable, Counting, Cuckoo) against their
// peers. Like the Bloom contenders, every implementation spells its timed
// loops out with concrete types; only Count, Bytes and Describe go through
// the interface.

// A FamilyFilter is one built filter of a family under comparison.
type FamilyFilter interface {
	// BenchAdd times adding keys, in order, to an empty filter configured
	// like this one; when the keys run out it starts over on a fresh
	// filter with the timer stopped.
	BenchAdd(b *testing.B, keys [][]byte)
	// BenchLookup times lookups of keys, cycling through them, and returns
	// how many were reported present.
	BenchLookup(b *testing.B, keys [][]byte) int
	// Count returns how many of keys the filter reports present.
	Count(keys [][]byte) int
	// Bytes is the memory held by the filter's tables.
	Bytes() int
	// Describe names the filter's parameters as built (sub-filters, bucket
	// and fingerprint sizes).
	Describe() string
}

// A RemoveBencher is a FamilyFilter that can delete keys.
type RemoveBencher interface {
	// BenchRemove times removing keys, in order, from the built filter,
	// which must hold them all. When the keys run out, and when the
	// benchmark ends, it adds back what it removed with the timer stopped,
	// so the filter holds the same keys afterwards.
	BenchRemove(b *testing.B, keys [][]byte)
}

// A Member builds one filter of a family group.
type Member struct {
	// Name labels the filter: "bloomgate…" for ours, the peer's name
	// otherwise.
	Name string
	// Ours marks bloomgate's filters, the ones the targets are for.
	Ours bool
	// Build returns a filter holding keys, configured for len(keys) keys.
	Build func(keys [][]byte) (FamilyFilter, error)
}

// A FamilyGroup is filters of one family configured alike, compared in one
// table block.
type FamilyGroup struct {
	Family  string // "scalable", "counting", "cuckoo"
	Setting string // what the members share, e.g. "p = 1 %"
	// P is the false-positive rate bloomgate's filters are configured for.
	P       float64
	Members []Member
}

// Family member names.
const (
	NameBoom      = "BoomFilters"
	NameSeiflotfy = "seiflotfy/cuckoofilter"
	NameLinvon    = "linvon/cuckoo-filter"
)

// scalableStart is how many keys the scalable filters are first sized for,
// as a fraction of the n they grow to: 10k at n = 1M, BoomFilters' default hint.
const scalableStart = 100

// seiflotfyFP is the design rate of seiflotfy/cuckoofilter at full load:
// 8-bit fingerprints in [1, 255], 2 buckets of 4 slots.
const seiflotfyFP = 8.0 / 255

// FamilyGroups returns the groups compared: each of bloomgate's filter
// families with its peers.
func FamilyGroups() []FamilyGroup {
	return []FamilyGroup{
		{
			Family: "scalable", P: 0.01, Setting: fmt.Sprintf("p = 1 %%, grown from n/%d keys", scalableStart),
			Members: []Member{
				{Name: "bloomgate", Ours: true, Build: buildScalable(0.5, 2)},
				{Name: "bloomgate r=0.8", Ours: true, Build: buildScalable(0.8, 2)},
				{Name: NameBoom, Build: buildBoomScalable},
			},
		},
		{
			Family: "counting", P: countingP, Setting: "p = 1 %, 4-bit counters",
			Members: []Member{
				{Name: "bloomgate", Ours: true, Build: buildCounting},
				{Name: NameBoom, Build: buildBoomCounting},
			},
		},
		{
			Family: "cuckoo", P: 0.001, Setting: "p = 0.1 %: 4-way buckets, 13-bit fingerprints",
			Members: []Member{
				{Name: "bloomgate", Ours: true, Build: buildCuckoo(filter.CuckooConfig{})},
				{Name: NameLinvon + " packed", Build: buildLinvon(13, linvon.TableTypePacked)},
			},
		},
		{
			Family: "cuckoo", P: seiflotfyFP, Setting: "p ≈ 3 %: 4-way buckets, 8-bit fingerprints",
			Members: []Member{
				{Name: "bloomgate", Ours: true, Build: buildCuckoo(filter.CuckooConfig{FPRate: seiflotfyFP, BucketSize: 4})},
				{Name: NameSeiflotfy, Build: buildSeiflotfy},
				{Name: NameLinvon, Build: buildLinvon(8, linvon.TableTypeSingle)},
			},
		},
	}
}

// addFailures counts the Adds a peer reported failed while its filter was
// built (its Add returns false when the table is full).
type addFailures struct{ failed int }

// FailedAdds returns how many Adds the peer reported failed while building.
func (a addFailures) FailedAdds() int { return a.failed }

// bloomgate: filter.Scalable.

type scalableFilter struct {
	f   *filter.Scalable
	cfg filter.ScalableConfig
}

func buildScalable(r float64, expansion uint32) func([][]byte) (FamilyFilter, error) {
	return func(keys [][]byte) (FamilyFilter, error) {
		cfg := filter.ScalableConfig{
			InitialCapacity: uint64(max(len(keys)/scalableStart, 1)),
			FPRate:          0.01,
			TightenRatio:    r,
			Expansion:       expansion,
		}
		f, err := filter.NewScalable(cfg)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if err := f.Add(k); err != nil {
				return nil, err
			}
		}
		return &scalableFilter{f: f, cfg: cfg}, nil
	}
}

func (x *scalableFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f, err := filter.NewScalable(x.cfg)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f, _ = filter.NewScalable(x.cfg)
			i = 0
			b.StartTimer()
		}
		if err := f.Add(keys[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func (x *scalableFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.MayContain(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *scalableFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.MayContain(k) {
			hits++
		}
	}
	return hits
}

func (x *scalableFilter) Bytes() int { return int(x.f.Stats().Bytes) }

func (x *scalableFilter) Describe() string {
	return fmt.Sprintf("from %s keys, r=%g, ×%d: %d sub-filters", fmtN(int(x.cfg.InitialCapacity)), x.cfg.TightenRatio, x.cfg.Expansion, x.f.Filters())
}

// BoomFilters: ScalableBloomFilter, partitioned Bloom sub-filters, each sized
// for the hint (it has no expansion factor), hashing with FNV-1 64.

type boomScalableFilter struct {
	f    *boom.ScalableBloomFilter
	hint uint
}

const boomScalableR = 0.8 // NewDefaultScalableBloomFilter's tightening ratio

func buildBoomScalable(keys [][]byte) (FamilyFilter, error) {
	x := &boomScalableFilter{hint: uint(max(len(keys)/scalableStart, 1))}
	x.f = x.new()
	for _, k := range keys {
		x.f.Add(k)
	}
	return x, nil
}

func (x *boomScalableFilter) new() *boom.ScalableBloomFilter {
	return boom.NewScalableBloomFilter(x.hint, 0.01, boomScalableR)
}

func (x *boomScalableFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := x.new()
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = x.new()
			i = 0
			b.StartTimer()
		}
		f.Add(keys[i])
		i++
	}
}

func (x *boomScalableFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Test(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *boomScalableFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Test(k) {
			hits++
		}
	}
	return hits
}

// Bytes sums the sub-filters' bit arrays: Capacity is the sum of their
// sizes m in bits (each is k partitions of ⌈m/k⌉ bits, rounded up to bytes,
// which is negligible).
func (x *boomScalableFilter) Bytes() int { return int(x.f.Capacity() / 8) }

func (x *boomScalableFilter) Describe() string {
	// Each sub-filter is sized for hint keys at fill ratio 0.5.
	return fmt.Sprintf("hint %s keys, r=%g, ×1 (fixed): %d sub-filters", fmtN(int(x.hint)), boomScalableR, boomSubFilters(x.f, x.hint))
}

// boomSubFilters counts f's sub-filters from its capacity: sub-filter i has
// m_i = ⌈hint·ln(1/p_i)/ln²2⌉ bits at p_i = 0.01·r^i.
func boomSubFilters(f *boom.ScalableBloomFilter, hint uint) int {
	total, n := f.Capacity(), 0
	for p := 0.01; total > 0; p *= boomScalableR {
		m := boom.OptimalM(hint, p)
		if m > total {
			break
		}
		total -= m
		n++
	}
	return n
}

// bloomgate: filter.Counting.

type countingFilter struct {
	f *filter.Counting
	n int
}

const countingP = 0.01

func newCounting(n int) (*filter.Counting, error) {
	return filter.NewCounting(filter.CountingConfig{Capacity: uint64(n), FPRate: countingP})
}

func buildCounting(keys [][]byte) (FamilyFilter, error) {
	f, err := newCounting(len(keys))
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		f.Add(k)
	}
	return &countingFilter{f: f, n: len(keys)}, nil
}

func (x *countingFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f, err := newCounting(x.n)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f, _ = newCounting(x.n)
			i = 0
			b.StartTimer()
		}
		f.Add(keys[i])
		i++
	}
}

func (x *countingFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.MayContain(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *countingFilter) BenchRemove(b *testing.B, keys [][]byte) {
	f, i := x.f, 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			for _, k := range keys {
				f.Add(k)
			}
			i = 0
			b.StartTimer()
		}
		if err := f.Remove(keys[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	for _, k := range keys[:i] {
		f.Add(k)
	}
}

func (x *countingFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.MayContain(k) {
			hits++
		}
	}
	return hits
}

func (x *countingFilter) Bytes() int { return int(x.f.Stats().Bytes) }

func (x *countingFilter) Describe() string {
	s := x.f.Stats()
	return fmt.Sprintf("%d counters, k=%d, 256-counter blocks", s.Bits/4, s.K)
}

// BoomFilters: CountingBloomFilter with 4-bit counters
// (NewDefaultCountingBloomFilter), hashing with FNV-1 64.

type boomCountingFilter struct {
	f *boom.CountingBloomFilter
	n int
}

func buildBoomCounting(keys [][]byte) (FamilyFilter, error) {
	f := boom.NewDefaultCountingBloomFilter(uint(len(keys)), countingP)
	for _, k := range keys {
		f.Add(k)
	}
	return &boomCountingFilter{f: f, n: len(keys)}, nil
}

func (x *boomCountingFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := boom.NewDefaultCountingBloomFilter(uint(x.n), countingP)
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = boom.NewDefaultCountingBloomFilter(uint(x.n), countingP)
			i = 0
			b.StartTimer()
		}
		f.Add(keys[i])
		i++
	}
}

func (x *boomCountingFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Test(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *boomCountingFilter) BenchRemove(b *testing.B, keys [][]byte) {
	f, i := x.f, 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			for _, k := range keys {
				f.Add(k)
			}
			i = 0
			b.StartTimer()
		}
		if !f.TestAndRemove(keys[i]) {
			b.Fatalf("%s: TestAndRemove of a present key failed", NameBoom)
		}
		i++
	}
	for _, k := range keys[:i] {
		f.Add(k)
	}
}

func (x *boomCountingFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Test(k) {
			hits++
		}
	}
	return hits
}

// Bytes is its m 4-bit counters.
func (x *boomCountingFilter) Bytes() int { return int((x.f.Capacity()*4 + 7) / 8) }

func (x *boomCountingFilter) Describe() string {
	return fmt.Sprintf("%d counters, k=%d, unblocked", x.f.Capacity(), x.f.K())
}

// bloomgate: filter.Cuckoo.

type cuckooFilter struct {
	f   *filter.Cuckoo
	cfg filter.CuckooConfig
}

func buildCuckoo(cfg filter.CuckooConfig) func([][]byte) (FamilyFilter, error) {
	return func(keys [][]byte) (FamilyFilter, error) {
		cfg := cfg
		cfg.Capacity = uint64(len(keys))
		f, err := filter.NewCuckoo(cfg)
		if err != nil {
			return nil, err
		}
		for _, k := range keys {
			if err := f.Add(k); err != nil {
				return nil, err
			}
		}
		return &cuckooFilter{f: f, cfg: cfg}, nil
	}
}

func (x *cuckooFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f, err := filter.NewCuckoo(x.cfg)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f, _ = filter.NewCuckoo(x.cfg)
			i = 0
			b.StartTimer()
		}
		if err := f.Add(keys[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func (x *cuckooFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.MayContain(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *cuckooFilter) BenchRemove(b *testing.B, keys [][]byte) {
	f, i := x.f, 0
	readd := func(keys [][]byte) {
		for _, k := range keys {
			if err := f.Add(k); err != nil {
				b.Fatal(err)
			}
		}
	}
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			readd(keys)
			i = 0
			b.StartTimer()
		}
		if err := f.Remove(keys[i]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	readd(keys[:i])
}

func (x *cuckooFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.MayContain(k) {
			hits++
		}
	}
	return hits
}

func (x *cuckooFilter) Bytes() int { return int(x.f.Stats().Bytes) }

func (x *cuckooFilter) Describe() string {
	s := x.f.Stats()
	return fmt.Sprintf("b=%d, f=%d, load %.1f %%", x.f.BucketSize(), x.f.FingerprintBits()[0], 100*s.FillRatio)
}

// seiflotfy/cuckoofilter: 4-way buckets of 8-bit fingerprints, a power of
// two of buckets, hashing with metro. A failed Insert drops a fingerprint
// (not necessarily the new key's), which the false-negative count shows.

type seiflotfyFilter struct {
	addFailures
	f *seiflotfy.Filter
	n int
}

func buildSeiflotfy(keys [][]byte) (FamilyFilter, error) {
	x := &seiflotfyFilter{f: seiflotfy.NewFilter(uint(len(keys))), n: len(keys)}
	for _, k := range keys {
		if !x.f.Insert(k) {
			x.failed++
		}
	}
	return x, nil
}

func (x *seiflotfyFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := seiflotfy.NewFilter(uint(x.n))
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = seiflotfy.NewFilter(uint(x.n))
			i = 0
			b.StartTimer()
		}
		f.Insert(keys[i])
		i++
	}
}

func (x *seiflotfyFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Lookup(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

// BenchRemove ignores Delete's result: after failed Inserts some keys are
// not in the filter.
func (x *seiflotfyFilter) BenchRemove(b *testing.B, keys [][]byte) {
	f, i := x.f, 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			for _, k := range keys {
				f.Insert(k)
			}
			i = 0
			b.StartTimer()
		}
		f.Delete(keys[i])
		i++
	}
	for _, k := range keys[:i] {
		f.Insert(k)
	}
}

func (x *seiflotfyFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Lookup(k) {
			hits++
		}
	}
	return hits
}

// Bytes is its buckets of 4 one-byte fingerprints, which Encode returns as is.
func (x *seiflotfyFilter) Bytes() int { return len(x.f.Encode()) }

func (x *seiflotfyFilter) Describe() string {
	return fmt.Sprintf("b=4, f=8, load %.1f %%", 100*float64(x.f.Count())/float64(x.Bytes()))
}

// linvon/cuckoo-filter: a port of the paper's C++ library: power-of-two
// buckets, metro hash, a victim slot; the packed table semi-sorts each
// bucket to save a bit per fingerprint (4-way buckets only).

type linvonFilter struct {
	addFailures
	f               *linvon.Filter
	n               int
	bits, tableType uint
}

func buildLinvon(bits, tableType uint) func([][]byte) (FamilyFilter, error) {
	return func(keys [][]byte) (FamilyFilter, error) {
		x := &linvonFilter{n: len(keys), bits: bits, tableType: tableType}
		x.f = x.new()
		for _, k := range keys {
			if !x.f.Add(k) {
				x.failed++
			}
		}
		return x, nil
	}
}

func (x *linvonFilter) new() *linvon.Filter {
	return linvon.NewFilter(4, x.bits, uint(x.n), x.tableType)
}

func (x *linvonFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := x.new()
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = x.new()
			i = 0
			b.StartTimer()
		}
		f.Add(keys[i])
		i++
	}
}

func (x *linvonFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Contain(keys[i]) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *linvonFilter) BenchRemove(b *testing.B, keys [][]byte) {
	f, i := x.f, 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			for _, k := range keys {
				f.Add(k)
			}
			i = 0
			b.StartTimer()
		}
		f.Delete(keys[i])
		i++
	}
	for _, k := range keys[:i] {
		f.Add(k)
	}
}

func (x *linvonFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Contain(k) {
			hits++
		}
	}
	return hits
}

func (x *linvonFilter) Bytes() int { return int(x.f.SizeInBytes()) }

func (x *linvonFilter) Describe() string {
	kind := "single"
	if x.tableType == linvon.TableTypePacked {
		kind = "packed, " + fmt.Sprint(x.bits-1) + " bits stored"
	}
	return fmt.Sprintf("b=4, f=%d (%s), load %.1f %%", x.bits, kind, 100*x.f.LoadFactor())
}
