package cli

import (
	"strings"
	"testing"
	"time"
)

func TestParseExpiringSet(t *testing.T) {
	f, err := parseServeFile(strings.NewReader(`set revoked {
  sqlite ./app.db
  kind expiring
  table revocations
  column jti
  expires-column expires_at
  max-ttl 24h
  capacity 1000000
  generations 12
  rebuild-interval 30s
}
`))
	if err != nil {
		t.Fatal(err)
	}
	s := f.Sets[0]
	if s.Kind != "expiring" || s.ExpiresColumn != "expires_at" || s.MaxTTL != 24*time.Hour || s.Generations != 12 || s.Capacity != 1000000 {
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
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n follow yes", "does not follow"},
		{"kind expiring\n table r\n column k\n expires-column e\n max-ttl 1h\n capacity 10\n slot s", "need the change feed"},
	} {
		_, err := parseServeFile(strings.NewReader("set r {\n sqlite ./a.db\n " + tt.conf + "\n}\n"))
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want an error containing %q", tt.conf, err, tt.want)
		}
	}
}
