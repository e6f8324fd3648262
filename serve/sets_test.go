package serve_test

import (
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/memfeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
)

// TestSetsOneMechanism: a gate-backed set and an expiring set are declared
// in the one Config.Sets, listed by SetNames, reported by SetStatus (the
// expiring one with its Expiring part), counted by Ready, refused alike as
// read-only, and a name declared twice is refused whatever the kinds.
func TestSetsOneMechanism(t *testing.T) {
	rows := rowsSource{{"jti-1", time.Now().Add(time.Hour)}}
	declare := func(gate, expiring string) []serve.SetConfig {
		return []serve.SetConfig{
			{Name: gate, Source: memfeed.NewSource("u1", "u2")},
			{Name: expiring, Expiring: &serve.ExpiringConfig{Source: rows, Params: serve.ExpiringParams{MaxTTL: 2 * time.Hour, Capacity: 100}}},
		}
	}
	if _, err := serve.Open(serve.Config{Sets: declare("x", "x")}); err == nil || !strings.Contains(err.Error(), "declared twice") {
		t.Errorf("a gate set and an expiring set both named x: %v, want declared twice", err)
	}
	if _, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{Name: "x", Source: memfeed.NewSource(),
		Expiring: &serve.ExpiringConfig{Source: rows, Params: serve.ExpiringParams{MaxTTL: time.Hour, Capacity: 1}}}}}); err == nil {
		t.Error("an expiring set with a gate's Source was accepted")
	}
	s, err := serve.Open(serve.Config{Sets: declare("users", "revoked")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	testsvc.Eventually(t, 10*time.Second, s.Ready, "sets never became ready")
	if got := strings.Join(s.SetNames(), ","); got != "revoked,users" {
		t.Errorf("SetNames = %s, want revoked,users", got)
	}
	us, ok := s.SetStatus("users")
	if !ok || !us.Ready || us.Expiring != nil || us.Mode != serve.ModeRebuild || us.Generation == 0 {
		t.Errorf("SetStatus(users) = %+v, %v; want a ready gate set", us, ok)
	}
	rs, ok := s.SetStatus("revoked")
	if !ok || !rs.Ready || rs.Expiring == nil || rs.Expiring.Rows != 1 || rs.Expiring.Scans == 0 ||
		rs.Mode != serve.ModeRebuild || rs.Role != serve.RoleNone || rs.State.String() != "ready" {
		t.Errorf("SetStatus(revoked) = %+v, %v; want a ready expiring set with 1 row", rs, ok)
	}
	if _, ok := s.SetStatus("nope"); ok {
		t.Error("SetStatus of an undeclared name: ok")
	}
	for _, name := range []string{"users", "revoked"} {
		if _, err := s.Delete([]string{name}); err != serve.ErrSetReadOnly {
			t.Errorf("Delete(%s) = %v, want ErrSetReadOnly", name, err)
		}
	}
}
