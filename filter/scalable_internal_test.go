package filter

import (
	"bytes"
	"errors"
	"strconv"
	"sync"
	"testing"
)

// TestScalableCapacityUnderConcurrency: however Adds interleave, no
// sub-filter takes more keys than its capacity, and the sub-filters follow
// the growth schedule.
func TestScalableCapacityUnderConcurrency(t *testing.T) {
	f, err := NewScalable(ScalableConfig{InitialCapacity: 50, FPRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			var buf []byte
			for i := range 5000 {
				buf = strconv.AppendInt(append(buf[:0], byte('a'+w)), int64(i), 10)
				if err := f.Add(buf); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	capacity, rate := uint64(50), 0.01*0.5
	var inserted uint64
	for i, s := range f.state.Load().subs {
		items := s.items.Load()
		if items > s.capacity || s.reserved.Load() != items {
			t.Errorf("sub-filter %d: %d keys, %d reserved, capacity %d", i, items, s.reserved.Load(), s.capacity)
		}
		if s.capacity != capacity || s.fpRate != rate {
			t.Errorf("sub-filter %d sized for %d at %g, want %d at %g", i, s.capacity, s.fpRate, capacity, rate)
		}
		inserted += items
		capacity, rate = capacity*2, rate*0.5
	}
	if n := f.items.Load(); n != 20_000 || inserted > n {
		t.Errorf("%d items, %d inserted", n, inserted)
	}
}

// TestDecodeScalableInconsistent damages sub-filters in ways each checksum
// accepts: the decoder must still refuse them.
func TestDecodeScalableInconsistent(t *testing.T) {
	build := func() *Scalable {
		f, _ := NewScalable(ScalableConfig{InitialCapacity: 100, FPRate: 0.01, Seed: 3})
		for i := range 250 {
			f.AddString("key" + strconv.Itoa(i))
		}
		if len(f.state.Load().subs) != 2 {
			t.Fatalf("%d sub-filters", len(f.state.Load().subs))
		}
		return f
	}
	for _, tc := range []struct {
		name   string
		damage func(s *scalableSub)
	}{
		{"seed", func(s *scalableSub) { s.seed = 4 }},
		{"capacity", func(s *scalableSub) { s.capacity++ }},
		{"rate", func(s *scalableSub) { s.fpRate *= 1.0000001 }},
		{"too few blocks", func(s *scalableSub) {
			z := s.Sizing()
			z.Blocks /= 2
			s.Bloom = newBloom(z, s.seed)
		}},
		{"items over capacity", func(s *scalableSub) { s.items.Store(s.capacity + 1) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := build()
			tc.damage(f.state.Load().subs[1])
			var buf bytes.Buffer
			if _, err := f.WriteTo(&buf); err != nil {
				t.Fatal(err)
			}
			_, err := DecodeScalable(&buf, DecodeConfig{})
			t.Log(err)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
	// Undamaged, the same filter decodes (also from a reader without Len).
	var buf bytes.Buffer
	build().WriteTo(&buf)
	if _, err := DecodeScalable(struct{ *bytes.Buffer }{&buf}, DecodeConfig{}); err != nil {
		t.Fatal(err)
	}
}
