package filter

import (
	"errors"
	"slices"
	"testing"
)

// TestCountingRemoveRollback drives Remove into the path where a counter
// reaches zero while decrementing: a key whose probes hit one counter twice,
// with that counter at 1 (as after removes out of step with adds). Remove
// must restore what it decremented and report ErrNotFound.
func TestCountingRemoveRollback(t *testing.T) {
	f, err := NewCounting(CountingConfig{Capacity: 1000, FPRate: 0.001})
	if err != nil {
		t.Fatal(err)
	}
	var h uint64
	for ; ; h++ { // a hash with a repeated probe position
		seen := map[uint64]bool{}
		dup := false
		g := h
		for range f.k {
			g *= probeMul
			pos := g >> 56
			dup = dup || seen[pos]
			seen[pos] = true
		}
		if dup {
			break
		}
	}
	b := f.block(h)
	g := h
	for range f.k { // every counter of h at 1
		g *= probeMul
		w, s := probe(g)
		b[w] |= 1 << s
	}
	before := slices.Clone(f.words)
	if err := f.RemoveHash(h); !errors.Is(err, ErrNotFound) {
		t.Fatalf("RemoveHash = %v, want ErrNotFound", err)
	}
	if !slices.Equal(before, f.words) {
		t.Fatal("a failed Remove left counters decremented")
	}
	if s := f.Stats(); s.RemoveMisses != 1 {
		t.Fatalf("RemoveMisses = %d", s.RemoveMisses)
	}
	if !f.MayContainHash(h) {
		t.Fatal("key lost")
	}
}

func TestCountingCounters(t *testing.T) {
	var w uint64
	for i := range 20 {
		increment(&w, 8)
		if got, want := w>>8&15, uint64(min(i+1, 15)); got != want || w&^(15<<8) != 0 {
			t.Fatalf("after %d increments: counter %d (word %x), want %d", i+1, got, w, want)
		}
	}
	if dec, ok := decrement(&w, 8); dec || !ok || w>>8&15 != 15 {
		t.Fatalf("decrement of a saturated counter: %v %v %x", dec, ok, w)
	}
	w = 2 << 60
	if dec, ok := decrement(&w, 60); !dec || !ok || w != 1<<60 {
		t.Fatalf("decrement 2: %v %v %x", dec, ok, w)
	}
	decrement(&w, 60)
	if dec, ok := decrement(&w, 60); dec || ok || w != 0 {
		t.Fatalf("decrement of zero: %v %v %x", dec, ok, w)
	}
	if got := nonzeroNibbles(0x0F01_0000_0800_0030); got != 4 {
		t.Fatalf("nonzeroNibbles = %d", got)
	}
}
