package fanout

import (
	"errors"
	"testing"
	"time"
)

func TestHeadWatch(t *testing.T) {
	stale := errors.New("stale")
	var w HeadWatch[uint64]
	if p, err := w.Check(10, 1, 50*time.Millisecond, stale); p != 10 || err != nil {
		t.Fatalf("first reading: %v, %v", p, err)
	}
	time.Sleep(60 * time.Millisecond)
	if _, err := w.Check(10, 1, 50*time.Millisecond, stale); !errors.Is(err, stale) {
		t.Fatalf("unchanged past the timeout: %v, want stale", err)
	}
	if p, err := w.Check(11, 2, 50*time.Millisecond, stale); p != 11 || err != nil {
		t.Fatalf("a new heartbeat: %v, %v", p, err)
	}
}

func TestValidSet(t *testing.T) {
	for s, want := range map[string]bool{"users": true, "a-b_C9": true, "": false, "a.b": false, "a b": false, "x" + string(make([]byte, 64)): false} {
		if ValidSet(s) != want {
			t.Errorf("ValidSet(%q) = %v", s, !want)
		}
	}
}
