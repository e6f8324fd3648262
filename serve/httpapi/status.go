package httpapi

import (
	_ "embed"
	"net/http"
)

// statusHTML is the status page: one file with its style and script, no
// external assets (many deployments reach no internet), and nothing to
// build. Its script polls GET /v1/sets and keeps the last minutes of
// samples for its charts in the browser.
//
//go:embed status/index.html
var statusHTML []byte

func statusPage(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	// The page runs its own inline script and style and talks to its own
	// origin only.
	h.Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	w.Write(statusHTML)
}
