package defaults

import (
	"testing"
	"time"
)

func TestSet(t *testing.T) {
	var d time.Duration
	Set(&d, time.Second)
	n := 3
	Set(&n, 7) // not zero: kept
	var s string
	Set(&s, "x")
	if d != time.Second || n != 3 || s != "x" {
		t.Fatalf("got %v %v %q", d, n, s)
	}
}
