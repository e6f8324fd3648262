package httpapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/serve"
)

// TestStatusPageAuth: the page at / needs the token like the API, and asks
// a browser for it (Basic, the token as the password); the Basic
// credentials a browser then sends also open the API the page polls.
func TestStatusPageAuth(t *testing.T) {
	st, err := serve.Open(serve.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Reserve("f", serve.BloomParams{Capacity: 100, ErrorRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(Handler(Config{Store: st, Token: "tok"}))
	defer ts.Close()
	get := func(path string, auth func(*http.Request)) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest("GET", ts.URL+path, nil)
		if auth != nil {
			auth(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp, string(body)
	}
	basic := func(pass string) func(*http.Request) {
		return func(r *http.Request) { r.SetBasicAuth("anyone", pass) }
	}
	bearer := func(r *http.Request) { r.Header.Set("Authorization", "Bearer tok") }
	for _, tt := range []struct {
		path      string
		auth      func(*http.Request)
		code      int
		challenge string // WWW-Authenticate
		body      string // a substring of the reply
	}{
		{"/", nil, 401, `Basic realm="bloomgate"`, `"unauthorized"`},
		{"/", basic("wrong"), 401, `Basic realm="bloomgate"`, `"unauthorized"`},
		{"/", basic("tok"), 200, "", "<title>bloomgate</title>"},
		{"/", bearer, 200, "", "<title>bloomgate</title>"},
		{"/v1/sets", nil, 401, `Bearer realm="bloomgate"`, `"unauthorized"`},
		{"/v1/sets", basic("wrong"), 401, `Bearer realm="bloomgate"`, `"unauthorized"`},
		{"/v1/sets", basic("tok"), 200, "", `"name":"f"`},
		{"/elsewhere", basic("tok"), 404, "", `"not_found"`},
	} {
		resp, body := get(tt.path, tt.auth)
		if resp.StatusCode != tt.code || resp.Header.Get("WWW-Authenticate") != tt.challenge || !strings.Contains(body, tt.body) {
			t.Errorf("GET %s: %d, challenge %q, %.80q; want %d, %q, %q", tt.path, resp.StatusCode,
				resp.Header.Get("WWW-Authenticate"), body, tt.code, tt.challenge, tt.body)
		}
	}
	resp, _ := get("/", bearer)
	if ct, csp := resp.Header.Get("Content-Type"), resp.Header.Get("Content-Security-Policy"); ct != "text/html; charset=utf-8" || !strings.Contains(csp, "connect-src 'self'") {
		t.Errorf("GET /: Content-Type %q, Content-Security-Policy %q", ct, csp)
	}
}

// TestStatusPageSelfContained: the page loads nothing from elsewhere (many
// deployments reach no internet): no src or href attributes, no URL but
// SVG's namespace name, and its one fetch is relative to the page.
func TestStatusPageSelfContained(t *testing.T) {
	page := string(statusHTML)
	if m := regexp.MustCompile(`(?i)\b(src|href)\s*=`).FindString(page); m != "" {
		t.Errorf("the page has a %s attribute", m)
	}
	for _, u := range regexp.MustCompile(`[a-z]+://[^"' ]*`).FindAllString(page, -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("the page names %s", u)
		}
	}
	if !strings.Contains(page, `fetch("v1/sets"`) {
		t.Error("the page does not poll v1/sets relative to itself")
	}
}
