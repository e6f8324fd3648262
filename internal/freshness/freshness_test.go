package freshness

import (
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

func TestTracker(t *testing.T) {
	t0 := time.Unix(1000, 0)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	var tr Tracker
	if _, ok := tr.Lag(at(0)); ok {
		t.Fatal("lag before any mark passed")
	}
	tr.Mark(Mark{At: at(0), Head: 100})
	tr.Mark(Mark{At: at(1), Head: 200})
	tr.Mark(Mark{At: at(2), Head: 300})
	if tr.Advance(99) {
		t.Fatal("passed a mark below its head")
	}
	if !tr.Advance(250) {
		t.Fatal("did not pass the marks at or below 250")
	}
	if lag, ok := tr.Lag(at(5)); !ok || lag != 4*time.Second {
		t.Fatalf("lag %v %v, want 4s from the mark at 1 s", lag, ok)
	}
	// An outstanding mark never makes the consumer fresher.
	tr.Mark(Mark{At: at(4), Head: 1000})
	if lag, _ := tr.Lag(at(5)); lag != 4*time.Second {
		t.Fatalf("lag %v after an outstanding mark, want 4s", lag)
	}
	// A mark older than the passed one is ignored even when passed.
	tr.Mark(Mark{At: at(0), Head: 1})
	tr.Advance(300)
	if m, _ := tr.Passed(); m.At != at(2) {
		t.Fatalf("passed %v, want the mark at 2 s", m)
	}
	tr.Advance(changefeed.Position(1000))
	if m, _ := tr.Passed(); m.At != at(4) || len(tr.pending) != 0 {
		t.Fatalf("passed %v (pending %d), want the mark at 4 s and none pending", m, len(tr.pending))
	}
	tr.Reset()
	if _, ok := tr.Passed(); ok {
		t.Fatal("Reset kept the passed mark")
	}
}

func TestTrackerBounded(t *testing.T) {
	var tr Tracker
	t0 := time.Unix(1000, 0)
	for i := range 3 * maxPending {
		tr.Mark(Mark{At: t0.Add(time.Duration(i) * time.Millisecond), Head: changefeed.Position(i + 10)})
	}
	if len(tr.pending) != maxPending {
		t.Fatalf("%d marks pending, want %d", len(tr.pending), maxPending)
	}
	// The oldest marks are kept: they are passed first.
	tr.Advance(10)
	if m, ok := tr.Passed(); !ok || !m.At.Equal(t0) {
		t.Fatalf("passed %v %v, want the first mark", m, ok)
	}
}
