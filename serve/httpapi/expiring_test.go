package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve"
)

func TestHTTPExpiring(t *testing.T) {
	var clockNs atomic.Int64
	clockNs.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	now := func() time.Time { return time.Unix(0, clockNs.Load()) }
	st, err := serve.Open(serve.Config{Now: now})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(Handler(Config{Store: st}))
	defer srv.Close()
	c := client{t: t, base: srv.URL}
	for _, tt := range []struct {
		method, path, body string
		status             int
		want               string // a substring of the reply, as %v
	}{
		{"PUT", "/v1/sets/revoked", `{"kind":"expiring","max_ttl_seconds":3600,"capacity":70000,"error_rate":0.001}`, 201, "kind:expiring"},
		{"PUT", "/v1/sets/bad", `{"kind":"expiring","capacity":10}`, 400, "max_ttl_seconds"},
		{"PUT", "/v1/sets/bad", `{"kind":"expiring","max_ttl_seconds":60,"capacity":10,"error_rate":0}`, 400, "error rate must be above 0 and below 1"},
		{"PUT", "/v1/sets/bad", `{"kind":"expiring","max_ttl_seconds":60,"capacity":10,"error_rate":1}`, 400, "error rate must be above 0 and below 1"},
		{"PUT", "/v1/sets/bad", `{"kind":"bloom","capacity":10,"error_rate":0}`, 400, "code:bad_argument"},
		{"PUT", "/v1/sets/revoked", `{"kind":"expiring","max_ttl_seconds":3600,"capacity":10}`, 409, "exists"},
		{"POST", "/v1/sets/revoked/keys", `{"keys":["a","b"],"ttl_seconds":60}`, 200, "added:[true true]"},
		{"POST", "/v1/sets/revoked/keys", fmt.Sprintf(`{"keys":["c"],"expires_at":%d}`, now().Add(90*time.Second).Unix()), 200, "added:[true]"},
		{"POST", "/v1/sets/revoked/keys", `{"keys":["d"]}`, 400, "exactly one"},
		{"POST", "/v1/sets/revoked/keys", `{"keys":["d"],"ttl_seconds":-1}`, 400, "ttl_seconds"},
		{"POST", "/v1/sets/revoked/keys", `{"keys":["d"],"ttl_seconds":7200}`, 400, "max TTL"},
		{"POST", "/v1/sets/revoked/keys", fmt.Sprintf(`{"keys":["d"],"expires_at":%d}`, now().Add(-time.Minute).Unix()), 400, "in the past"},
		{"POST", "/v1/sets/missing/keys", `{"keys":["d"],"ttl_seconds":10}`, 404, "not found"},
		{"GET", "/v1/sets/revoked/contains?key=a", "", 200, "may_contain:true"},
		{"POST", "/v1/sets/revoked/contains", `{"keys":["a","c","zz"]}`, 200, "results:[true true false]"},
		{"GET", "/v1/sets/revoked", "", 200, "max_ttl_seconds:3600"},
		{"DELETE", "/v1/sets/revoked/keys?key=a", "", 409, "wrong_type"},
	} {
		status, out := c.do(tt.method, tt.path, tt.body)
		if got := fmt.Sprint(out); status != tt.status || !contains(got, tt.want) {
			t.Errorf("%s %s %s = %d %s, want %d with %q", tt.method, tt.path, tt.body, status, got, tt.status, tt.want)
		}
	}
	clockNs.Add(int64(20 * time.Minute))
	if _, out := c.do("POST", "/v1/sets/revoked/contains", `{"keys":["a","b","c"]}`); fmt.Sprint(out["results"]) != "[false false false]" {
		t.Errorf("after expiry: %v", out)
	}
	if status, _ := c.do("DELETE", "/v1/sets/revoked", ""); status != 200 {
		t.Errorf("DELETE = %d", status)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// downSource fails every scan.
type downSource struct{}

func (downSource) ScanExpiring(context.Context, func([]byte, time.Time) error) error {
	return errors.New("database down")
}

// TestHTTPExpiringSetNotReady: a table-backed expiring set that was never
// scanned reports ready false, answers may_contain true, and fails /readyz.
func TestHTTPExpiringSetNotReady(t *testing.T) {
	st, err := serve.Open(serve.Config{Sets: []serve.SetConfig{{Name: "revoked", Expiring: &serve.ExpiringConfig{
		Source: downSource{}, Params: serve.ExpiringParams{MaxTTL: time.Hour, Capacity: 100},
	}}}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv := httptest.NewServer(Handler(Config{Store: st}))
	defer srv.Close()
	c := client{t: t, base: srv.URL}
	if status, out := c.do("GET", "/v1/sets/revoked", ""); status != 200 || out["ready"] != false ||
		!strings.Contains(fmt.Sprint(out["expiring"]), "table_backed:true") {
		t.Errorf("GET = %d %v", status, out)
	}
	if _, out := c.do("GET", "/v1/sets/revoked/contains?key=x", ""); out["may_contain"] != true {
		t.Errorf("contains on a set never scanned = %v", out)
	}
	if status, _ := c.do("GET", "/readyz", ""); status != 503 {
		t.Errorf("/readyz = %d, want 503", status)
	}
}
