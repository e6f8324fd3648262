package filtertest

import "testing"

// Lookup is what the shared benchmarks look keys up in.
type Lookup interface {
	MayContain(key []byte) bool
}

// Bench describes a filter for BenchCore.
type Bench struct {
	// Full holds Present.
	Full Lookup
	// Present are the keys Full holds; Absent keys it does not hold (a
	// power of two of them).
	Present, Absent [][]byte
	// NewAdd returns the Add of a new empty filter sized like Full.
	NewAdd func() func(key []byte)
	// Refill, when positive, is how many keys a new filter takes before Add
	// starts again on another one (timer stopped): a filter that refuses
	// keys past its capacity, such as a cuckoo filter, sets it.
	Refill int
}

// BenchCore runs the sub-benchmarks every filter family has, one key per
// op, allocations reported: Add (the Present keys in turn, into the filter
// from NewAdd), MayContain/present and MayContain/absent (on Full).
func BenchCore(b *testing.B, fb Bench) {
	b.Helper()
	n, mask := len(fb.Present), len(fb.Absent)-1
	if n == 0 || len(fb.Absent)&mask != 0 {
		b.Fatalf("filtertest.BenchCore: %d present keys, %d absent (want > 0 and a power of two)", n, len(fb.Absent))
	}
	b.Run("Add", func(b *testing.B) {
		add := fb.NewAdd()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			if fb.Refill > 0 && i == fb.Refill {
				b.StopTimer()
				add = fb.NewAdd()
				b.StartTimer()
				i = 0
			}
			add(fb.Present[i%n])
			i++
		}
	})
	b.Run("MayContain/present", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			fb.Full.MayContain(fb.Present[i%n])
			i++
		}
	})
	b.Run("MayContain/absent", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			fb.Full.MayContain(fb.Absent[i&mask])
			i++
		}
	})
}
