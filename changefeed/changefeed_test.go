package changefeed

import (
	"errors"
	"testing"
)

func TestPosition(t *testing.T) {
	for s, want := range map[string]Position{"0": 0, "1": 1, "97500059720": 0x16_B374D848, "18446744073709551615": ^Position(0)} {
		p, err := ParsePosition(s)
		if err != nil || p != want || p.String() != s || Decimal.Format(p) != s {
			t.Errorf("%q: %v, %v; want %v", s, p, err, uint64(want))
		}
		if q, err := Decimal.Parse(s); err != nil || q != want {
			t.Errorf("Decimal.Parse(%q) = %v, %v", s, q, err)
		}
	}
	// Leading zeros are digits, up to 20 of them.
	if p, err := ParsePosition("00000000000000000012"); err != nil || p != 12 {
		t.Errorf("20 digits: %v, %v", p, err)
	}
	for _, s := range []string{"", "16/B374D848", "0/0", "+1", "-1", " 1", "1 ", "0x10", "1_000", "18446744073709551616", "000000000000000000012", "１"} {
		if _, err := ParsePosition(s); !errors.Is(err, ErrBadPosition) {
			t.Errorf("%q: %v, want ErrBadPosition", s, err)
		}
	}
}

func FuzzParsePosition(f *testing.F) {
	f.Add("97500059720")
	f.Add("0")
	f.Add("18446744073709551616")
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
