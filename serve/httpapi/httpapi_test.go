package httpapi

import (
	"context"
	"encoding/json"
	"fmt"
	"github.com/bloomgate/bloomgate/internal/demo"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/source/postgres"
	"github.com/bloomgate/bloomgate/source/sqlite"
)

type client struct {
	t     *testing.T
	base  string
	token string
}

func (c client) do(method, path, body string) (int, map[string]any) {
	c.t.Helper()
	req, err := http.NewRequest(method, c.base+path, strings.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &out); err != nil {
			c.t.Fatalf("%s %s: bad JSON %q", method, path, data)
		}
	}
	return resp.StatusCode, out
}

func TestHTTPAPI(t *testing.T) {
	db, err := sqlite.Open(filepath.Join(t.TempDir(), "app.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	users := demo.SQLiteUsers{DB: db, Table: "users"}
	ctx := context.Background()
	users.Create(ctx)
	users.Load(ctx, 100, func(i int) string { return fmt.Sprintf("u%d@x", i) })
	reg := prometheus.NewRegistry()
	// Positions as bloomgate serve configures them (PostgreSQL's LSNs).
	st, err := serve.Open(serve.Config{Positions: postgres.LSN, Sets: []serve.SetConfig{{
		Name: "users", Source: users.Source(), Registerer: reg,
		Confirm: sqlite.Confirm{DB: db, Query: "SELECT 1 FROM users WHERE email = ?"},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ts := httptest.NewServer(Handler(Config{Store: st, Token: "tok", Gatherer: reg}))
	defer ts.Close()
	c := client{t, ts.URL, "tok"}
	testsvc.Eventually(t, time.Minute, func() bool {
		if code, _ := c.do("GET", "/readyz", ""); code != http.StatusServiceUnavailable && !st.Ready() {
			t.Fatalf("/readyz while warming: %d", code)
		}
		return st.Ready()
	}, "store not ready")
	for _, tt := range []struct {
		method, path, body string
		code               int
		check              string // a substring of the JSON reply
	}{
		{"GET", "/healthz", "", 200, `"ok"`},
		{"GET", "/readyz", "", 200, `"ready":true`},
		{"GET", "/readyz", "", 200, `"users":{"generation":1,"lag_seconds":0,"mode":"rebuild","position":"0/0","ready":true,"role":"none","state":"ready"}`},
		{"GET", "/v1/sets/users/contains?key=u7@x&at=0/16B3", "", 409, `"code":"no_position"`},
		{"GET", "/v1/sets/users/exists?key=u7@x&at=12", "", 200, `"exists":true`}, // rebuild-only: confirmed
		{"GET", "/v1/sets/users/contains?key=u7@x&at=x/y", "", 400, `"code":"bad_position"`},
		{"GET", "/v1/sets/users/exists?key=u7@x&at=", "", 400, `"code":"bad_position"`},
		{"GET", "/v1/sets/nope/contains?key=u7@x&at=1", "", 404, `"code":"not_set"`},
		{"PUT", "/v1/sets/f", `{"kind":"bloom","capacity":1000,"error_rate":0.001}`, 201, `"kind":"bloom"`},
		{"PUT", "/v1/sets/f", `{}`, 409, `"code":"exists"`},
		{"PUT", "/v1/sets/c", `{"kind":"cuckoo"}`, 201, `"kind":"cuckoo"`},
		{"PUT", "/v1/sets/bad", `{"kind":"bloom","bogus":1}`, 400, `"code":"bad_request"`},
		{"POST", "/v1/sets/f/keys", `{"keys":["a","b","a"]}`, 200, `[true,true,false]`},
		{"GET", "/v1/sets/f/contains?key=a", "", 200, `"may_contain":true`},
		{"POST", "/v1/sets/f/contains", `{"keys":["a","zz"]}`, 200, `[true,false]`},
		{"POST", "/v1/sets/c/keys", `{"keys":["x"]}`, 200, `[true]`},
		{"DELETE", "/v1/sets/c/keys?key=x", "", 200, `"removed":true`},
		{"DELETE", "/v1/sets/f/keys?key=a", "", 409, `"code":"remove_unsupported"`},
		{"POST", "/v1/sets/missing/keys", `{"keys":["x"]}`, 404, `"code":"not_found"`},
		{"GET", "/v1/sets/users/exists?key=u5@x", "", 200, `"exists":true`},
		{"GET", "/v1/sets/users/exists?key=nobody", "", 200, `"exists":false`},
		{"GET", "/v1/sets/f/exists?key=a", "", 404, `"code":"not_set"`},
		{"GET", "/v1/sets/users/contains?key=u7@x", "", 200, `"may_contain":true`},
		{"GET", "/v1/sets", "", 200, `"name":"users"`},
		{"GET", "/v1/sets/users", "", 200, `"has_confirm":true`},
		{"GET", "/v1/sets/users", "", 200, `"mode":"rebuild"`},
		{"GET", "/v1/sets/users", "", 200, `"role":"none"`},
		{"GET", "/v1/sets/users", "", 200, `"position":"0/0"`},
		{"GET", "/v1/sets/users", "", 200, `"target_fp_rate":0.001`},
		{"GET", "/v1/sets/users", "", 200, `"builds":1`},
		{"GET", "/v1/sets/users", "", 200, `"generation":1`},
		{"DELETE", "/v1/sets/users", "", 403, `"code":"read_only"`},
		{"DELETE", "/v1/sets/f", "", 200, `"deleted":true`},
		{"GET", "/v1/sets/f", "", 404, `"code":"not_found"`},
		{"GET", "/v1/nothing", "", 404, `"code":"not_found"`},
	} {
		code, out := c.do(tt.method, tt.path, tt.body)
		js, _ := json.Marshal(out)
		if code != tt.code || !strings.Contains(string(js), tt.check) {
			t.Errorf("%s %s: %d %s; want %d with %s", tt.method, tt.path, code, js, tt.code, tt.check)
		}
	}
	if code, out := (client{t, ts.URL, "wrong"}).do("GET", "/v1/sets", ""); code != 401 || out["error"] == nil {
		t.Errorf("wrong token: %d %v", code, out)
	}
	if code, _ := (client{t, ts.URL, ""}).do("GET", "/healthz", ""); code != 200 {
		t.Errorf("/healthz without a token: %d", code)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `set="users"`) {
		t.Errorf("/metrics lacks the set's gate metrics:\n%.500s", body)
	}
}
