package httpapi

import (
	"fmt"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// switchDep is a dependency whose readiness the test sets.
type switchDep struct{ ready atomic.Bool }

func (d *switchDep) Readiness() (bool, any) {
	return d.ready.Load(), map[string]any{"ready": d.ready.Load(), "addr": "db:5432"}
}

// TestReadyzDependencies: a dependency not ready makes /readyz 503 and is
// shown under its name; ready again, 200.
func TestReadyzDependencies(t *testing.T) {
	st, err := serve.Open(serve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	dep := &switchDep{}
	srv := httptest.NewServer(Handler(Config{Store: st, Dependencies: map[string]Dependency{"postgres-upstream": dep}}))
	defer srv.Close()
	c := client{t: t, base: srv.URL}
	status, out := c.do("GET", "/readyz", "")
	if want := "map[postgres-upstream:map[addr:db:5432 ready:false]]"; status != 503 || fmt.Sprint(out["dependencies"]) != want || out["ready"] != false {
		t.Errorf("/readyz with the upstream down: %d %v, want 503 and dependencies %s", status, out, want)
	}
	dep.ready.Store(true)
	if status, out := c.do("GET", "/readyz", ""); status != 200 || out["ready"] != true {
		t.Errorf("/readyz with the upstream up: %d %v", status, out)
	}
}
