package postgres

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// The pipeline hands the decoder the same bytes in the same order, whatever
// the writes' sizes, and stops the COPY with fn's first error.
func TestPipeline(t *testing.T) {
	var text strings.Builder
	var want []string
	for i := range 50000 {
		k := fmt.Sprintf("user%d@example.com", i)
		if i%1000 == 7 {
			k = strings.Repeat("x", 100000) // rows longer than a chunk
		}
		want = append(want, k)
		text.WriteString(k + "\n")
	}
	in := []byte(text.String())
	var got []string
	d := &copyDecoder{fn: func(k []byte) error { got = append(got, string(k)); return nil }}
	p := newPipeline(d)
	rng := rand.New(rand.NewPCG(1, 1))
	for b := in; len(b) > 0; {
		n := min(len(b), 1+rng.IntN(200))
		if _, err := p.Write(b[:n]); err != nil {
			t.Fatal(err)
		}
		b = b[n:]
	}
	if err := p.close(); err != nil || d.finish() != nil {
		t.Fatal(err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("%d rows out, want %d (or in another order)", len(got), len(want))
	}

	boom := errors.New("boom")
	calls := 0
	d = &copyDecoder{fn: func([]byte) error {
		if calls++; calls == 1000 {
			return boom
		}
		return nil
	}}
	p = newPipeline(d)
	var werr error
	for b := in; len(b) > 0 && werr == nil; b = b[min(len(b), 100):] {
		_, werr = p.Write(b[:min(len(b), 100)])
	}
	if err := p.close(); err == nil || !errors.Is(d.err, boom) {
		t.Fatalf("close %v, decoder error %v; want boom", err, d.err)
	}
	if werr == nil {
		t.Fatal("writes went on to the end after fn failed")
	}
	if calls != 1000 {
		t.Fatalf("fn called %d times after failing at 1000", calls)
	}
}
