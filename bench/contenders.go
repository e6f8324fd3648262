// Package bench compares bloomgate's filter.Bloom, and its other filter
// families (families.go: Scalable, Counting, Cuckoo), with other Go membership
// filters: the same e-mail-like keys, the same process, the same run. It is a
// module of its own so that the peers it imports stay out of bloomgate's
// go.mod.
//
// The Go benchmarks (bench_test.go) and the compare command (cmd/compare) run
// the same timed loops, defined here.
package bench

import (
	"bytes"
	"fmt"
	"io"
	"testing"

	"github.com/FastFilter/xorfilter"
	bloom "github.com/bits-and-blooms/bloom/v3"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/greatroar/blobloom"
)

// A Filter is one built filter under comparison.
//
// Each implementation spells its timed loops out with concrete types: a call
// through an interface per key would add a nanosecond or two to every
// operation compared. Count, called once per chunk of keys, may go through
// the interface.
type Filter interface {
	// BenchAdd times adding keys, in order, to an empty filter sized like
	// this one. When the keys run out it starts over on a fresh filter with
	// the timer stopped, so every timed Add inserts a key not yet present.
	BenchAdd(b *testing.B, keys [][]byte)
	// BenchLookup times lookups of keys, cycling through them, and returns
	// how many were reported present.
	BenchLookup(b *testing.B, keys [][]byte) int
	// BenchLookupBatch is BenchLookup with the keys handed over in batches
	// of LookupBatch (see benchBatches; one op is still one key): bloomgate
	// answers a batch with one MayContainMany call, the peers, which have
	// no batched lookup, with their lookup in a loop over the batch.
	BenchLookupBatch(b *testing.B, keys [][]byte) int
	// Count returns how many of keys the filter reports present.
	Count(keys [][]byte) int
	// Bytes is the memory held by the filter's table.
	Bytes() int
	// Encode writes the filter in the peer's own serialization (Contender.Codec).
	Encode(w io.Writer) error
	// Decode reads what Encode wrote.
	Decode(enc []byte) (Filter, error)
}

// A Contender builds one kind of filter.
type Contender struct {
	// Name labels the contender in tables and benchmark names.
	Name string
	// Static filters are built once from all keys and cannot Add. Their
	// false-positive rate is fixed by the structure, so Build ignores p.
	Static bool
	// Codec names the serialization Encode and Decode use (encode into a
	// bytes.Buffer, decode from a bytes.Reader).
	Codec string
	// Build returns a filter holding keys, sized for len(keys) keys at rate p.
	Build func(keys [][]byte, p float64) (Filter, error)
}

// Contender names.
const (
	NameBloomgate    = "bloomgate"
	NameBloomgateH   = "bloomgate-hashed"
	NameBloomgateB   = "bloomgate-builder"
	NameBlobloom     = "blobloom"
	NameBlobloomSync = "blobloom-sync"
	NameBitsAndBloom = "bits-and-blooms"
	NameBinaryFuse8  = "binaryfuse8"
)

// Contenders returns every filter compared, bloomgate first.
func Contenders() []Contender {
	return []Contender{
		{Name: NameBloomgate, Codec: "Bloom.WriteTo / filter.DecodeBloom (CRC-32C verified)", Build: buildBloomgate},
		{Name: NameBloomgateH, Codec: "the same as bloomgate (same filter, looked up as MayContainHash(Hash(key)))", Build: buildBloomgateHashed},
		{Name: NameBloomgateB, Codec: "the same as bloomgate (filled with a filter.BloomBuilder, then looked up like bloomgate)", Build: buildBloomgateBuilder},
		{Name: NameBlobloom, Codec: "blobloom.Dump / blobloom.NewLoader(r).Load", Build: buildBlobloom},
		{Name: NameBlobloomSync, Codec: "blobloom.DumpSync / blobloom.NewLoader(r).LoadSync", Build: buildBlobloomSync},
		{Name: NameBitsAndBloom, Codec: "BloomFilter.WriteTo / BloomFilter.ReadFrom", Build: buildBitsAndBlooms},
		{Name: NameBinaryFuse8, Static: true, Codec: "BinaryFuse8.Save / xorfilter.LoadBinaryFuse8", Build: buildBinaryFuse8},
	}
}

// hash is the key hash given to the peers that take a uint64: the XXH3-64
// (seed 0) filter.Bloom computes internally.
func hash(key []byte) uint64 { return filter.Hash(key, 0) }

// bloomgate: filter.Bloom.

type bloomgateFilter struct {
	f *filter.Bloom
	n int
	p float64
}

func newBloomgate(n int, p float64) (*filter.Bloom, error) {
	return filter.NewBloom(filter.BloomConfig{Capacity: uint64(n), FPRate: p})
}

func buildBloomgate(keys [][]byte, p float64) (Filter, error) {
	f, err := newBloomgate(len(keys), p)
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		f.Add(k)
	}
	return &bloomgateFilter{f: f, n: len(keys), p: p}, nil
}

func (x *bloomgateFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f, err := newBloomgate(x.n, x.p)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f, _ = newBloomgate(x.n, x.p)
			i = 0
			b.StartTimer()
		}
		f.Add(keys[i])
		i++
	}
}

func (x *bloomgateFilter) BenchLookup(b *testing.B, keys [][]byte) int {
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

func (x *bloomgateFilter) BenchLookupBatch(b *testing.B, keys [][]byte) int {
	f := x.f
	return benchBatches(b, keys, func(keys [][]byte, out []bool) int { return f.MayContainMany(keys, out) })
}

func (x *bloomgateFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.MayContain(k) {
			hits++
		}
	}
	return hits
}

func (x *bloomgateFilter) Bytes() int { return int(x.f.Stats().Bytes) }

func (x *bloomgateFilter) Encode(w io.Writer) error { _, err := x.f.WriteTo(w); return err }

func (x *bloomgateFilter) Decode(enc []byte) (Filter, error) {
	f, err := filter.DecodeBloom(bytes.NewReader(enc), filter.DecodeConfig{})
	if err != nil {
		return nil, err
	}
	return &bloomgateFilter{f: f, n: x.n, p: x.p}, nil
}

// bloomgate-hashed: the same filter.Bloom, used the way blobloom is: the
// caller's loop hashes (Bloom.Hash) and passes the hash (AddHash,
// MayContainHash). Both calls inline, so the loop calls only the hash
// function. docs/benchmarks.md has the figures.

type bloomgateHashedFilter struct{ bloomgateFilter }

func buildBloomgateHashed(keys [][]byte, p float64) (Filter, error) {
	f, err := buildBloomgate(keys, p)
	if err != nil {
		return nil, err
	}
	return &bloomgateHashedFilter{*f.(*bloomgateFilter)}, nil
}

func (x *bloomgateHashedFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f, err := newBloomgate(x.n, x.p)
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f, _ = newBloomgate(x.n, x.p)
			i = 0
			b.StartTimer()
		}
		f.AddHash(f.Hash(keys[i]))
		i++
	}
}

func (x *bloomgateHashedFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.MayContainHash(f.Hash(keys[i])) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *bloomgateHashedFilter) BenchLookupBatch(b *testing.B, keys [][]byte) int {
	f := x.f
	var hs [LookupBatch]uint64
	return benchBatches(b, keys, func(keys [][]byte, out []bool) int {
		hs := hs[:len(keys)]
		for i, k := range keys {
			hs[i] = f.Hash(k)
		}
		return f.MayContainHashMany(hs, out)
	})
}

func (x *bloomgateHashedFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.MayContainHash(x.f.Hash(k)) {
			hits++
		}
	}
	return hits
}

func (x *bloomgateHashedFilter) Decode(enc []byte) (Filter, error) {
	f, err := x.bloomgateFilter.Decode(enc)
	if err != nil {
		return nil, err
	}
	return &bloomgateHashedFilter{*f.(*bloomgateFilter)}, nil
}

// bloomgate-builder: the same filter.Bloom, filled by a filter.BloomBuilder
// (plain writes, one goroutine, published by Finish) instead of Bloom.Add.
// Lookups are bloomgate's.

type bloomgateBuilderFilter struct{ bloomgateFilter }

func buildBloomgateBuilder(keys [][]byte, p float64) (Filter, error) {
	bld, err := filter.NewBloomBuilder(filter.BloomConfig{Capacity: uint64(len(keys)), FPRate: p})
	if err != nil {
		return nil, err
	}
	for _, k := range keys {
		bld.Add(k)
	}
	return &bloomgateBuilderFilter{bloomgateFilter{f: bld.Finish(), n: len(keys), p: p}}, nil
}

func (x *bloomgateBuilderFilter) BenchAdd(b *testing.B, keys [][]byte) {
	newBuilder := func() *filter.BloomBuilder {
		bld, err := filter.NewBloomBuilder(filter.BloomConfig{Capacity: uint64(x.n), FPRate: x.p})
		if err != nil {
			b.Fatal(err)
		}
		return bld
	}
	bld := newBuilder()
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			bld = newBuilder()
			i = 0
			b.StartTimer()
		}
		bld.Add(keys[i])
		i++
	}
}

func (x *bloomgateBuilderFilter) Decode(enc []byte) (Filter, error) {
	f, err := x.bloomgateFilter.Decode(enc)
	if err != nil {
		return nil, err
	}
	return &bloomgateBuilderFilter{*f.(*bloomgateFilter)}, nil
}

// blobloom: the plain (not concurrency-safe) blobloom.Filter, the fastest it
// offers for one goroutine; blobloom.SyncFilter is its concurrent twin.

type blobloomFilter struct {
	f *blobloom.Filter
	n int
	p float64
}

func newBlobloom(n int, p float64) *blobloom.Filter {
	return blobloom.New(blobloom.Optimize(blobloom.Config{Capacity: uint64(n), FPRate: p}))
}

func buildBlobloom(keys [][]byte, p float64) (Filter, error) {
	f := newBlobloom(len(keys), p)
	for _, k := range keys {
		f.Add(hash(k))
	}
	return &blobloomFilter{f: f, n: len(keys), p: p}, nil
}

func (x *blobloomFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := newBlobloom(x.n, x.p)
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = newBlobloom(x.n, x.p)
			i = 0
			b.StartTimer()
		}
		f.Add(hash(keys[i]))
		i++
	}
}

func (x *blobloomFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Has(hash(keys[i])) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *blobloomFilter) BenchLookupBatch(b *testing.B, keys [][]byte) int {
	f := x.f
	return benchBatches(b, keys, func(keys [][]byte, out []bool) int {
		n := 0
		for i, k := range keys {
			ok := f.Has(hash(k))
			out[i] = ok
			if ok {
				n++
			}
		}
		return n
	})
}

func (x *blobloomFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Has(hash(k)) {
			hits++
		}
	}
	return hits
}

func (x *blobloomFilter) Bytes() int { return int(x.f.NumBits() / 8) }

func (x *blobloomFilter) Encode(w io.Writer) error { _, err := blobloom.Dump(w, x.f, ""); return err }

func (x *blobloomFilter) Decode(enc []byte) (Filter, error) {
	l, err := blobloom.NewLoader(bytes.NewReader(enc))
	if err != nil {
		return nil, err
	}
	f, err := l.Load(nil)
	if err != nil {
		return nil, err
	}
	return &blobloomFilter{f: f, n: x.n, p: x.p}, nil
}

// blobloom-sync: blobloom.SyncFilter, blobloom's filter that is safe for
// concurrent Adds and lookups (an atomic OR per bit), as filter.Bloom is.

type blobloomSyncFilter struct {
	f *blobloom.SyncFilter
	n int
	p float64
}

func newBlobloomSync(n int, p float64) *blobloom.SyncFilter {
	return blobloom.NewSyncOptimized(blobloom.Config{Capacity: uint64(n), FPRate: p})
}

func buildBlobloomSync(keys [][]byte, p float64) (Filter, error) {
	f := newBlobloomSync(len(keys), p)
	for _, k := range keys {
		f.Add(hash(k))
	}
	return &blobloomSyncFilter{f: f, n: len(keys), p: p}, nil
}

func (x *blobloomSyncFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := newBlobloomSync(x.n, x.p)
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = newBlobloomSync(x.n, x.p)
			i = 0
			b.StartTimer()
		}
		f.Add(hash(keys[i]))
		i++
	}
}

func (x *blobloomSyncFilter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Has(hash(keys[i])) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *blobloomSyncFilter) BenchLookupBatch(b *testing.B, keys [][]byte) int {
	f := x.f
	return benchBatches(b, keys, func(keys [][]byte, out []bool) int {
		n := 0
		for i, k := range keys {
			ok := f.Has(hash(k))
			out[i] = ok
			if ok {
				n++
			}
		}
		return n
	})
}

func (x *blobloomSyncFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Has(hash(k)) {
			hits++
		}
	}
	return hits
}

// Bytes is what the SyncFilter allocated: blobloom.Optimize's bits rounded
// up to whole blocks, as NewSync does (SyncFilter has no NumBits).
func (x *blobloomSyncFilter) Bytes() int {
	nbits, _ := blobloom.Optimize(blobloom.Config{Capacity: uint64(x.n), FPRate: x.p})
	nbits = (nbits + blobloom.BlockBits - 1) / blobloom.BlockBits * blobloom.BlockBits
	return int(nbits / 8)
}

func (x *blobloomSyncFilter) Encode(w io.Writer) error {
	_, err := blobloom.DumpSync(w, x.f, "")
	return err
}

func (x *blobloomSyncFilter) Decode(enc []byte) (Filter, error) {
	l, err := blobloom.NewLoader(bytes.NewReader(enc))
	if err != nil {
		return nil, err
	}
	f, err := l.LoadSync(nil)
	if err != nil {
		return nil, err
	}
	return &blobloomSyncFilter{f: f, n: x.n, p: x.p}, nil
}

// bits-and-blooms: a classic Bloom filter, hashing with 128-bit murmur3.

type bitsAndBloomsFilter struct {
	f *bloom.BloomFilter
	n int
	p float64
}

func newBitsAndBlooms(n int, p float64) *bloom.BloomFilter {
	return bloom.NewWithEstimates(uint(n), p)
}

func buildBitsAndBlooms(keys [][]byte, p float64) (Filter, error) {
	f := newBitsAndBlooms(len(keys), p)
	for _, k := range keys {
		f.Add(k)
	}
	return &bitsAndBloomsFilter{f: f, n: len(keys), p: p}, nil
}

func (x *bitsAndBloomsFilter) BenchAdd(b *testing.B, keys [][]byte) {
	f := newBitsAndBlooms(x.n, x.p)
	i := 0
	for b.Loop() {
		if i == len(keys) {
			b.StopTimer()
			f = newBitsAndBlooms(x.n, x.p)
			i = 0
			b.StartTimer()
		}
		f.Add(keys[i])
		i++
	}
}

func (x *bitsAndBloomsFilter) BenchLookup(b *testing.B, keys [][]byte) int {
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

func (x *bitsAndBloomsFilter) BenchLookupBatch(b *testing.B, keys [][]byte) int {
	f := x.f
	return benchBatches(b, keys, func(keys [][]byte, out []bool) int {
		n := 0
		for i, k := range keys {
			ok := f.Test(k)
			out[i] = ok
			if ok {
				n++
			}
		}
		return n
	})
}

func (x *bitsAndBloomsFilter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Test(k) {
			hits++
		}
	}
	return hits
}

func (x *bitsAndBloomsFilter) Bytes() int { return len(x.f.BitSet().Words()) * 8 }

func (x *bitsAndBloomsFilter) Encode(w io.Writer) error { _, err := x.f.WriteTo(w); return err }

func (x *bitsAndBloomsFilter) Decode(enc []byte) (Filter, error) {
	f := new(bloom.BloomFilter)
	if _, err := f.ReadFrom(bytes.NewReader(enc)); err != nil {
		return nil, err
	}
	return &bitsAndBloomsFilter{f: f, n: x.n, p: x.p}, nil
}

// binaryfuse8: FastFilter's binary fuse filter with 8-bit fingerprints, a
// static reference (false-positive rate fixed near 2^-8).

type binaryFuse8Filter struct{ f *xorfilter.BinaryFuse8 }

func buildBinaryFuse8(keys [][]byte, _ float64) (Filter, error) {
	hs := make([]uint64, len(keys))
	for i, k := range keys {
		hs[i] = hash(k)
	}
	f, err := xorfilter.PopulateBinaryFuse8(hs)
	if err != nil {
		return nil, fmt.Errorf("binaryfuse8: %w", err)
	}
	return &binaryFuse8Filter{f: f}, nil
}

func (x *binaryFuse8Filter) BenchAdd(b *testing.B, _ [][]byte) {
	b.Skip("binaryfuse8 is static: it cannot Add")
}

func (x *binaryFuse8Filter) BenchLookup(b *testing.B, keys [][]byte) int {
	f, hits, i := x.f, 0, 0
	for b.Loop() {
		if f.Contains(hash(keys[i])) {
			hits++
		}
		if i++; i == len(keys) {
			i = 0
		}
	}
	return hits
}

func (x *binaryFuse8Filter) BenchLookupBatch(b *testing.B, keys [][]byte) int {
	f := x.f
	return benchBatches(b, keys, func(keys [][]byte, out []bool) int {
		n := 0
		for i, k := range keys {
			ok := f.Contains(hash(k))
			out[i] = ok
			if ok {
				n++
			}
		}
		return n
	})
}

func (x *binaryFuse8Filter) Count(keys [][]byte) int {
	hits := 0
	for _, k := range keys {
		if x.f.Contains(hash(k)) {
			hits++
		}
	}
	return hits
}

func (x *binaryFuse8Filter) Bytes() int { return len(x.f.Fingerprints) }

func (x *binaryFuse8Filter) Encode(w io.Writer) error { return x.f.Save(w) }

func (x *binaryFuse8Filter) Decode(enc []byte) (Filter, error) {
	f, err := xorfilter.LoadBinaryFuse8(bytes.NewReader(enc))
	if err != nil {
		return nil, err
	}
	return &binaryFuse8Filter{f: f}, nil
}

// LookupBatch is how many keys a batched lookup is given at once.
const LookupBatch = 256

// benchBatches times lookup on consecutive batches of LookupBatch keys,
// cycling through keys (a batch never wraps around: the last one of a cycle
// may be shorter), and returns how many keys were reported present. One op is
// one key: the batch is looked up when b.Loop reaches its first key, so the
// count covers whole batches, up to LookupBatch-1 keys past b.N.
func benchBatches(b *testing.B, keys [][]byte, lookup func(keys [][]byte, out []bool) int) int {
	var out [LookupBatch]bool
	hits, i, left := 0, 0, 0
	for b.Loop() {
		if left == 0 {
			batch := keys[i:min(i+LookupBatch, len(keys))]
			hits += lookup(batch, out[:len(batch)])
			left = len(batch)
			if i += len(batch); i == len(keys) {
				i = 0
			}
		}
		left--
	}
	return hits
}
