package server

import (
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

func TestParseExpiringSet(t *testing.T) {
	f, err := ParseConfig(strings.NewReader(`set revoked {
  sqlite ./app.db
  kind expiring
  table revocations
  column jti
  expires-column expires_at
  max-ttl 24h
  capacity 1000000
  generations 12
  rebuild-interval 30s
  follow no
}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Sets[0]
	if s.Family != filter.FamilyWindowed || s.Expiring.ExpiresColumn != "expires_at" || s.Expiring.MaxTTL != 24*time.Hour || s.Expiring.Generations != 12 || s.Capacity != 1000000 {
		t.Errorf("set = %+v", s)
	}
	for _, tt := range []struct{ conf, want string }{
		{"kind expiring\n table r\n column k\n expires-column e\n capacity 10", "needs max-ttl"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h", "needs capacity"},
		{"kind expiring\n table r\n column k\n max-ttl 1h\n capacity 10", "needs expires-column"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n confirm SELECT 1", "no confirm"},
		{"table r\n column k\n max-ttl 1h", "need kind expiring"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n generations 1", "from 2 to 64"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl soon\n capacity 10", "want a duration"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10", `line 1: set "r": follow: SQLite has no change feed: add "follow no"`},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n follow no\n slot s", "need the change feed"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n follow no\n max-lag 1s", "need the change feed"},
	} {
		_, err := ParseConfig(strings.NewReader("set r {\n sqlite ./a.db\n " + tt.conf + "\n}\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.conf, err, tt.want)
		}
	}
	// With postgres it follows the change feed by default, and rescans
	// only with "follow no".
	pg := "set r {\n postgres postgres://x@127.0.0.1/db\n kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n"
	f, err = ParseConfig(strings.NewReader(pg + " max-lag 5s\n slot s\n}\n"))
	if err != nil || f.Sets[0].RebuildOnly || f.Sets[0].Feed.MaxLag != 5*time.Second || f.Sets[0].Feed.Slot != "s" {
		t.Errorf("followed postgres expiring set: %+v, %v", f, err)
	}
	f, err = ParseConfig(strings.NewReader(pg + " follow no\n rebuild-interval 1m\n}\n"))
	if err != nil || !f.Sets[0].RebuildOnly {
		t.Errorf("rescan-only postgres expiring set: %+v, %v", f, err)
	}
	for _, tt := range []struct{ conf, want string }{
		{"rebuild-interval 1m", `never rescans; remove it, or set "follow no"`},
		{"snapshot-interval 1m", "takes no snapshot-interval"},
		{"fanout redis\n redis redis://127.0.0.1", "takes no fanout"},
	} {
		_, err := ParseConfig(strings.NewReader(pg + " " + tt.conf + "\n}\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.conf, err, tt.want)
		}
	}
	_, err = ParseConfig(strings.NewReader("set r {\n postgres postgres://x@127.0.0.1/db\n kind expiring\n query SELECT k, e FROM r\n max-ttl 1h\n capacity 10\n}\n"))
	if err == nil || !strings.Contains(err.Error(), "follow no") {
		t.Errorf("a followed query: %v, want an error asking for follow no", err)
	}
}
