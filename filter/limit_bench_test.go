package filter

import (
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"github.com/bloomgate/bloomgate/internal/cputime"
)

// BenchmarkLimit sets the batched lookup beside what the machine's memory
// allows, in the same run, at 10 M and 100 M keys (19 MB and 194 MB tables,
// far larger than the CPU caches), with the table on huge pages
// (pages=huge, the default where Linux gives them) and on base pages
// (pages=4k):
//
//   - floor: random cache-line loads into a buffer of the table's size, a
//     group of hashGroup lines prefetched while the group before is read,
//     as the batched lookup does; no hashing, no probing. One op is one line.
//   - floor-keys: floor, also reading each key's slice header and first
//     byte, in order: the memory a batched lookup of these keys must read
//     (the 1 M keys, 56 MB with their headers, do not fit in the caches
//     either, so they stream from memory beside the table's lines).
//   - batch: MayContainMany of absent e-mail-like keys, 256 a call.
//   - batch-scalar: batch with the probe that tests the K bits one after
//     the other (probeBlocks), where the CPU has AVX-512 (otherwise batch
//     again).
//   - batch-hashed: MayContainHashMany of the same keys' hashes.
//   - single: MayContain of the same keys, one at a time.
//
// One op is one key (one cache line); cpu-ns/op is the thread's CPU time per
// op (internal/cputime), steadier than ns/op on a shared machine. The ratio
// batch/floor is how close
// the batched lookup comes to the memory's limit.
//
//	go test -run '^$' -bench Limit -count 6 ./filter | tee limit.txt
//	benchstat -col /op limit.txt
func BenchmarkLimit(b *testing.B) {
	absent := limitKeys(1 << 20)
	for _, n := range []uint64{10_000_000, 100_000_000} {
		for _, pages := range []string{"huge", "4k"} {
			hugePagesOn = pages == "huge"
			f := limitFilter(b, n)
			hugePagesOn = true
			hs := make([]uint64, len(absent))
			hashKeys(absent, f.seed, hs)
			name := fmt.Sprintf("n=%dM/pages=%s", n/1_000_000, pages)
			// floorBuf is a buffer of the table's size on the same pages.
			floorBuf := func() []uint64 {
				hugePagesOn = pages == "huge"
				buf := allocWords(uint64(len(f.words)))
				hugePagesOn = true
				for i := range buf {
					buf[i] = uint64(i)
				}
				return buf
			}
			b.Run(name+"/op=floor", func(b *testing.B) {
				buf := floorBuf()
				benchGroups(b, hs, func(hs []uint64) { floorSink += floorLoads(buf, f.blocks, hs) })
			})
			b.Run(name+"/op=floor-keys", func(b *testing.B) {
				buf := floorBuf()
				i := 0
				benchGroups(b, hs, func(hs []uint64) {
					floorSink += floorKeyLoads(buf, f.blocks, absent[i:i+len(hs)], hs)
					if i += len(hs); i == len(absent) {
						i = 0
					}
				})
			})
			b.Run(name+"/op=batch", func(b *testing.B) {
				var out [256]bool
				benchGroups(b, absent, func(keys [][]byte) { f.MayContainMany(keys, out[:]) })
			})
			b.Run(name+"/op=batch-scalar", func(b *testing.B) {
				saved := useAVX512
				useAVX512 = false
				defer func() { useAVX512 = saved }()
				var out [256]bool
				benchGroups(b, absent, func(keys [][]byte) { f.MayContainMany(keys, out[:]) })
			})
			b.Run(name+"/op=batch-hashed", func(b *testing.B) {
				var out [256]bool
				benchGroups(b, hs, func(hs []uint64) { f.MayContainHashMany(hs, out[:]) })
			})
			b.Run(name+"/op=single", func(b *testing.B) {
				i := 0
				t := cputime.Start(b)
				for b.Loop() {
					f.MayContain(absent[i])
					if i++; i == len(absent) {
						i = 0
					}
				}
				t.Stop()
			})
		}
	}
}

var floorSink uint64

// limitFilter returns a filter of n random keys at the default FP rate.
func limitFilter(b *testing.B, n uint64) *Bloom {
	bb, err := NewBloomBuilder(BloomConfig{Capacity: n})
	if err != nil {
		b.Fatal(err)
	}
	r := rand.New(rand.NewPCG(n, 1))
	var hs [4096]uint64
	for done := uint64(0); done < n; done += uint64(len(hs)) {
		for i := range hs {
			hs[i] = r.Uint64()
		}
		bb.AddHashMany(hs[:min(uint64(len(hs)), n-done)])
	}
	return bb.Finish()
}

// benchGroups calls fn with consecutive groups of 256 items, cycling through
// items (len(items) is a multiple of 256); one op is one item.
func benchGroups[T any](b *testing.B, items []T, fn func([]T)) {
	b.ReportAllocs()
	i := 0
	t := cputime.Start(b)
	for b.Loop() {
		if i%256 == 0 {
			fn(items[i : i+256])
		}
		if i++; i == len(items) {
			i = 0
		}
	}
	t.Stop()
}

// floorLoads loads the first word of the block of each hash, hashGroup lines
// prefetched ahead of the group being read, as MayContainHashMany does, and
// returns their sum.
func floorLoads(words []uint64, blocks uint64, hs []uint64) uint64 {
	var sum uint64
	prefetchWords(words, blocks, hs[:min(len(hs), hashGroup)])
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		prefetchWords(words, blocks, hs[end:min(end+hashGroup, len(hs))])
		for _, h := range hs[i:end] {
			sum += blockAt(words, (h>>32)*blocks>>32)[0]
		}
	}
	return sum
}

// floorKeyLoads is floorLoads that also reads each key's length and first
// byte (keys[i] goes with hs[i]).
func floorKeyLoads(words []uint64, blocks uint64, keys [][]byte, hs []uint64) uint64 {
	var sum uint64
	prefetchWords(words, blocks, hs[:min(len(hs), hashGroup)])
	for i := 0; i < len(hs); i += hashGroup {
		end := min(i+hashGroup, len(hs))
		prefetchWords(words, blocks, hs[end:min(end+hashGroup, len(hs))])
		for j, h := range hs[i:end] {
			k := keys[i+j]
			sum += uint64(len(k)) + uint64(k[0]) + blockAt(words, (h>>32)*blocks>>32)[0]
		}
	}
	return sum
}

func prefetchWords(words []uint64, blocks uint64, hs []uint64) {
	f := Bloom{words: words, blocks: blocks}
	f.prefetch(hs)
}

// limitKeys returns n e-mail-like keys (20 to 30 bytes), like
// filtertest.Emails, which this package's internal tests cannot import.
func limitKeys(n int) [][]byte {
	r := rand.New(rand.NewPCG(2, 0x5eed))
	out := make([][]byte, n)
	buf := make([]byte, 0, 32*n)
	for i := range n {
		start := len(buf)
		buf = append(buf, "user."...)
		buf = strconv.AppendUint(buf, r.Uint64()%1e6, 36)
		buf = append(buf, '.')
		buf = strconv.AppendInt(buf, int64(i), 36)
		buf = append(buf, "@example.com"...)
		out[i] = buf[start:len(buf):len(buf)]
	}
	return out
}
