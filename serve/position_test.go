package serve_test

import (
	"testing"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestStorePositions: a store reads a client's position in its notation
// (Config.Positions) or as a decimal integer, writes it in its notation, and
// its error names what it takes.
func TestStorePositions(t *testing.T) {
	for _, tc := range []struct {
		name    string
		n       changefeed.Notation
		ok      map[string]changefeed.Position
		bad     []string
		format  string // of 0x16_B374D848
		badText string
	}{
		{
			name:    "decimal",
			ok:      map[string]changefeed.Position{"0": 0, "97500059720": 0x16_B374D848, "18446744073709551615": ^changefeed.Position(0)},
			bad:     []string{"", "16/B374D848", "0/0", "-1", "x", "18446744073709551616"},
			format:  "97500059720",
			badText: "position is not a decimal integer",
		},
		{
			name: "lsn", n: postgres.LSN,
			ok:      map[string]changefeed.Position{"0": 0, "0/0": 0, "16/B374D848": 0x16_B374D848, "97500059720": 0x16_B374D848, "FFFFFFFF/FFFFFFFF": ^changefeed.Position(0)},
			bad:     []string{"", "1/", "/1", "x/1", "1/100000000", "-1", "not-a-position"},
			format:  "16/B374D848",
			badText: "position is not an LSN such as 16/B374D848 or a decimal integer",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := serve.Open(serve.Config{Positions: tc.n})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			for text, want := range tc.ok {
				if p, err := s.ParsePosition(text); err != nil || p != want {
					t.Errorf("ParsePosition(%q) = %d, %v; want %d", text, p, err, want)
				}
			}
			for _, text := range tc.bad {
				_, err := s.ParsePosition(text)
				if serve.CodeOf(err) != serve.CodeBadPosition || err.Error() != tc.badText {
					t.Errorf("ParsePosition(%q) = %v (%v), want CodeBadPosition %q", text, err, serve.CodeOf(err), tc.badText)
				}
			}
			if got := s.FormatPosition(0x16_B374D848); got != tc.format {
				t.Errorf("FormatPosition = %q, want %q", got, tc.format)
			}
		})
	}
}
