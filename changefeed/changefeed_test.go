package changefeed

import (
	"errors"
	"testing"
)

func TestPosition(t *testing.T) {
	for s, want := range map[string]Position{"0/0": 0, "16/B374D848": 0x16_B374D848, "FFFFFFFF/FFFFFFFF": ^Position(0), "0/1878708": 0x1878708} {
		p, err := ParsePosition(s)
		if err != nil || p != want || p.String() != s {
			t.Errorf("%q: %v (%s), %v; want %v", s, p, p, err, uint64(want))
		}
	}
	for _, s := range []string{"", "1", "1/", "/1", "x/1", "1/100000000", "-1/1", "1/1/1"} {
		if _, err := ParsePosition(s); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%q: %v, want ErrBadPosition", s, err)
		}
	}
}

func FuzzParsePosition(f *testing.F) {
	f.Add("16/B374D848")
	f.Add("0/0")
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParsePosition(s)
		if err != nil {
			return
		}
		q, err := ParsePosition(p.String())
		if err != nil || q != p {
			t.Fatalf("%q → %v → %q → %v, %v", s, uint64(p), p, uint64(q), err)
		}
	})
}
