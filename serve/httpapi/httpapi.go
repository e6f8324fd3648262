// Package httpapi serves a serve.Store over HTTP: JSON under /v1, Prometheus
// metrics on /metrics, /healthz and /readyz probes, and a status page at /.
//
// Routes (name is a standalone filter or a table-backed set):
//
//	GET    /                              the status page (HTML; it polls /v1/sets)
//	GET    /v1/sets                       every key with its kind and stats
//	GET    /v1/sets/{name}                one key's stats
//	PUT    /v1/sets/{name}                create a standalone filter (body: FilterSpec)
//	DELETE /v1/sets/{name}                delete a standalone filter
//	GET    /v1/sets/{name}/contains?key=K {"key":K,"may_contain":bool}
//	GET    /v1/sets/{name}/contains?key=K&at=LSN   as of position LSN (read-your-writes)
//	POST   /v1/sets/{name}/contains       body {"keys":[…]} → {"results":[bool…]}
//	GET    /v1/sets/{name}/exists?key=K   exact (the confirm path): {"key":K,"exists":bool}
//	GET    /v1/sets/{name}/exists?key=K&at=LSN     exact, as of position LSN
//	POST   /v1/sets/{name}/keys           add, body {"keys":[…]} → {"added":[bool…]}
//	DELETE /v1/sets/{name}/keys?key=K     remove (cuckoo filters): {"removed":bool}
//
// A table-backed set that is not ready answers may_contain true. The at
// parameter is the writer's position, taken after its commit with SELECT
// pg_current_wal_insert_lsn() (or a decimal integer): the answer is false
// only if the key is absent with every transaction up to it applied; on a
// set that does not follow a change feed /contains refuses it
// (no_position) and /exists asks the confirm query as without it. /readyz
// reports every table-backed set's mode, role, state, reason, position and
// lag, and answers 503 while one is not ready. Errors are
// {"error":{"code":C,"message":M}} with a stable code (see serve.Error; plus
// "bad_request", "unauthorized", "method_not_allowed"). With a Token, every
// route but /healthz and /readyz needs "Authorization: Bearer <token>", or
// HTTP Basic authentication with the token as the password (any user name):
// a browser asks for it on the status page and sends it with the page's
// requests.
//
// The http.Handler that Handler returns is safe for concurrent use.
// docs/serve.md is the server's manual.
package httpapi

import (
	"crypto/subtle"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/serve"
)

// Config configures Handler.
type Config struct {
	// Store is the keyspace served. Required.
	Store *serve.Store
	// Token, if set, is the bearer token every route but the probes needs.
	Token string
	// Gatherer serves /metrics. Default: none (404).
	Gatherer prometheus.Gatherer
	// MaxBodyBytes bounds a request body. Default: 16 MiB.
	MaxBodyBytes int64
	// Dependencies are what the server needs besides its sets (the
	// PostgreSQL front end's upstream): /readyz shows each under its name
	// in "dependencies", and is 503 while one is not ready. Default: none.
	Dependencies map[string]Dependency
}

// Dependency is something /readyz reports besides the sets.
type Dependency interface {
	// Readiness reports whether the dependency is ready, and what /readyz
	// shows of it (JSON-encoded).
	Readiness() (ready bool, detail any)
}

// FilterSpec is the body of PUT /v1/sets/{name}. Zero fields take
// RedisBloom's defaults (see serve.BloomParams and serve.CuckooParams).
type FilterSpec struct {
	Kind     string `json:"kind"` // "bloom" (default) or "cuckoo"
	Capacity uint64 `json:"capacity"`
	// ErrorRate is a Bloom or expiring key's error rate, in (0, 1); absent
	// means the default. A pointer, so that 0 is refused, not taken for
	// the default.
	ErrorRate  *float64 `json:"error_rate"`
	Expansion  int      `json:"expansion"`
	NonScaling bool     `json:"nonscaling"`  // bloom: never grow
	BucketSize int      `json:"bucket_size"` // cuckoo
	// Expiring keys (kind "expiring"): MaxTTLSeconds is required; Capacity
	// is the adds expected within one max TTL; error_rate defaults to 0.001.
	MaxTTLSeconds int64 `json:"max_ttl_seconds"`
	Generations   int   `json:"generations"`
}

// SetInfo describes one key in GET /v1/sets.
type SetInfo struct {
	Name  string `json:"name"`
	Kind  string `json:"kind"` // bloom, cuckoo or set (table-backed)
	Ready bool   `json:"ready"`
	// State is a table-backed set's gate state (and Reason outside ready).
	State  string `json:"state,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Filter is the set's filter kind: bloom or cuckoo.
	Filter         string  `json:"filter,omitempty"`
	Capacity       uint64  `json:"capacity"`
	Items          uint64  `json:"items"`
	Bytes          uint64  `json:"bytes"`
	Filters        int     `json:"filters,omitempty"`
	Lookups        uint64  `json:"lookups,omitempty"`
	Absent         uint64  `json:"absent,omitempty"`
	FailOpen       uint64  `json:"fail_open,omitempty"`
	Confirms       uint64  `json:"confirms,omitempty"`
	ObservedFP     uint64  `json:"observed_false_positives,omitempty"`
	ObservedFPRate float64 `json:"observed_fp_rate,omitempty"`
	HasConfirm     bool    `json:"has_confirm,omitempty"`
	// Mode, Role, Position and LagSeconds are a table-backed set's, as in
	// /readyz.
	Mode       string  `json:"mode,omitempty"`
	Role       string  `json:"role,omitempty"`
	Position   string  `json:"position,omitempty"`
	LagSeconds float64 `json:"lag_seconds,omitempty"`
	// TargetFPRate is the false-positive rate a table-backed set's filter
	// was sized for, FillRatio the share of its bits or slots in use, and
	// Builds the filter generation it serves: warm-ups, rebuilds and
	// bootstraps so far (0 while warming).
	TargetFPRate float64 `json:"target_fp_rate,omitempty"`
	FillRatio    float64 `json:"fill_ratio,omitempty"`
	Builds       uint64  `json:"builds,omitempty"`
	// EstimatedFPRate is the rate estimated from the filter's fill;
	// Generation the serving filter's (on a fan-out instance, the
	// feeder's); Swaps the filters that replaced a serving one without
	// failing open, and LastSwap (RFC 3339) when the last did.
	EstimatedFPRate float64 `json:"estimated_fp_rate,omitempty"`
	Generation      uint64  `json:"generation,omitempty"`
	Swaps           uint64  `json:"swaps,omitempty"`
	LastSwap        string  `json:"last_swap,omitempty"`
	// Expiring describes an expiring key (kind "expiring").
	Expiring *ExpiringInfo `json:"expiring,omitempty"`
}

type api struct {
	cfg   Config
	store *serve.Store
}

// Handler returns the HTTP handler.
func Handler(cfg Config) http.Handler {
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 16 << 20
	}
	a := &api{cfg: cfg, store: cfg.Store}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", a.readyz)
	mux.Handle("GET /{$}", a.authAs("Basic", http.HandlerFunc(statusPage)))
	if cfg.Gatherer != nil {
		mux.Handle("GET /metrics", a.auth(promhttp.HandlerFor(cfg.Gatherer, promhttp.HandlerOpts{})))
	}
	mux.Handle("GET /v1/sets", a.auth(http.HandlerFunc(a.list)))
	mux.Handle("GET /v1/sets/{name}", a.auth(http.HandlerFunc(a.get)))
	mux.Handle("PUT /v1/sets/{name}", a.auth(http.HandlerFunc(a.create)))
	mux.Handle("DELETE /v1/sets/{name}", a.auth(http.HandlerFunc(a.del)))
	mux.Handle("GET /v1/sets/{name}/contains", a.auth(http.HandlerFunc(a.contains)))
	mux.Handle("POST /v1/sets/{name}/contains", a.auth(http.HandlerFunc(a.containsMany)))
	mux.Handle("GET /v1/sets/{name}/exists", a.auth(http.HandlerFunc(a.exists)))
	mux.Handle("POST /v1/sets/{name}/keys", a.auth(http.HandlerFunc(a.add)))
	mux.Handle("DELETE /v1/sets/{name}/keys", a.auth(http.HandlerFunc(a.remove)))
	mux.Handle("/", a.auth(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such route")
	})))
	return mux
}

func (a *api) auth(h http.Handler) http.Handler { return a.authAs("Bearer", h) }

// authAs requires the token, as a bearer token or as a Basic password, and
// answers a request without it with a challenge of the given scheme: Basic
// on the status page, so that a browser asks for it.
func (a *api) authAs(challenge string, h http.Handler) http.Handler {
	if a.cfg.Token == "" {
		return h
	}
	want := []byte("Bearer " + a.cfg.Token)
	token := []byte(a.cfg.Token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ok := subtle.ConstantTimeCompare([]byte(r.Header.Get("Authorization")), want) == 1
		if _, pass, basic := r.BasicAuth(); basic && !ok {
			ok = subtle.ConstantTimeCompare([]byte(pass), token) == 1
		}
		if !ok {
			w.Header().Set("WWW-Authenticate", challenge+` realm="bloomgate"`)
			writeError(w, http.StatusUnauthorized, "unauthorized", "missing or wrong bearer token")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"code": code, "message": msg}})
}

// codeOf maps a serve.Code to the API's stable code and HTTP status.
// Codes without an entry are 500 with the code's own name.
var codeOf = map[serve.Code]struct {
	name   string
	status int
}{
	serve.CodeNotFound:          {"not_found", http.StatusNotFound},
	serve.CodeNotSet:            {"not_set", http.StatusNotFound},
	serve.CodeExists:            {"exists", http.StatusConflict},
	serve.CodeWrongType:         {"wrong_type", http.StatusConflict},
	serve.CodeFull:              {"full", http.StatusInsufficientStorage},
	serve.CodeGrowthLimit:       {"full", http.StatusInsufficientStorage},
	serve.CodeOOM:               {"oom", http.StatusInsufficientStorage},
	serve.CodeReadOnly:          {"read_only", http.StatusForbidden},
	serve.CodeBadArgument:       {"bad_argument", http.StatusBadRequest},
	serve.CodeNoConfirm:         {"no_confirm", http.StatusBadRequest},
	serve.CodeRemoveUnsupported: {"remove_unsupported", http.StatusConflict},
	serve.CodeClosed:            {"closed", http.StatusServiceUnavailable},
	serve.CodeLoading:           {"loading", http.StatusConflict},
	serve.CodeConfirmFailed:     {"confirm_failed", http.StatusBadGateway},
	serve.CodeNoPosition:        {"no_position", http.StatusConflict},
	serve.CodeBadPosition:       {"bad_position", http.StatusBadRequest},
	serve.CodeBadData:           {"bad_data", http.StatusInternalServerError},
	serve.CodeBadOffset:         {"bad_data", http.StatusInternalServerError},
	serve.CodeLogWrite:          {"log_write", http.StatusInsufficientStorage}, // nothing changed: the log could not take it
}

func writeServeError(w http.ResponseWriter, err error) {
	if errors.Is(err, serve.ErrOutcomeUnknown) {
		// Applied but not durable: an error status would say nothing
		// changed. Abort the response (the connection closes), as a crash.
		panic(http.ErrAbortHandler)
	}
	var se *serve.Error
	if errors.As(err, &se) {
		c, ok := codeOf[se.Code]
		if !ok {
			c.name, c.status = se.Code.String(), http.StatusInternalServerError
		}
		writeError(w, c.status, c.name, se.Msg)
		return
	}
	writeError(w, http.StatusInternalServerError, "internal", err.Error())
}

// SetReadiness is one table-backed set in /readyz.
type SetReadiness struct {
	Ready bool   `json:"ready"`
	Mode  string `json:"mode"`  // follow, rebuild, or rescan (a table-backed expiring set)
	Role  string `json:"role"`  // none, follower, feeder, standby or instance
	State string `json:"state"` // the gate's state: warming, ready, rebuilding, degraded
	// Reason says why the set is not ready ("" when it is).
	Reason string `json:"reason,omitempty"`
	// Position is the change-feed position applied, in the store's notation
	// (serve.Config.Positions: an LSN such as "0/0" under bloomgate serve;
	// zero in rebuild mode); LagSeconds how far it is behind the feed's head.
	Position   string  `json:"position"`
	LagSeconds float64 `json:"lag_seconds"`
	// Generation is the serving filter's: on a fan-out instance, the
	// feeder's generation it serves.
	Generation uint64 `json:"generation"`
}

// rfc3339 formats t, or "" for the zero time.
func rfc3339(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(time.RFC3339Nano)
}

// readiness describes a table-backed set (expiring or not) as /readyz does.
// An expiring set that does not follow a feed rescans its table: mode
// "rescan".
func (a *api) readiness(st serve.SetStatus) SetReadiness {
	mode := st.Mode.String()
	if st.Expiring != nil && st.Mode == serve.ModeRebuild {
		mode = "rescan"
	}
	return SetReadiness{Ready: st.Ready, Mode: mode, Role: st.Role.String(), State: st.State.String(),
		Reason: st.Reason, Position: a.store.FormatPosition(st.Position), LagSeconds: st.Lag.Seconds(), Generation: st.Generation}
}

func (a *api) readyz(w http.ResponseWriter, r *http.Request) {
	sets := map[string]SetReadiness{}
	ready := true
	for _, name := range a.store.SetNames() {
		st, ok := a.store.SetStatus(name)
		if !ok {
			continue // an expiring set deleted meanwhile
		}
		sr := a.readiness(st)
		sets[name] = sr
		ready = ready && sr.Ready
	}
	body := map[string]any{"sets": sets}
	if len(a.cfg.Dependencies) > 0 {
		deps := map[string]any{}
		for name, d := range a.cfg.Dependencies {
			ok, detail := d.Readiness()
			deps[name] = detail
			ready = ready && ok
		}
		body["dependencies"] = deps
	}
	body["ready"] = ready
	status := http.StatusOK
	if !ready {
		status = http.StatusServiceUnavailable
	}
	writeJSON(w, status, body)
}

// atParam returns the at parameter's position, if given.
func (a *api) atParam(w http.ResponseWriter, r *http.Request) (pos changefeed.Position, given, ok bool) {
	if !r.URL.Query().Has("at") {
		return 0, false, true
	}
	pos, err := a.store.ParsePosition(r.URL.Query().Get("at"))
	if err != nil {
		writeServeError(w, err)
		return 0, true, false
	}
	return pos, true, true
}

func (a *api) info(name string) (SetInfo, bool) {
	if s := a.store.Set(name); s != nil {
		st := s.Stats()
		rd := a.readiness(s.Status())
		return SetInfo{
			Name: name, Kind: "set", Ready: s.Ready(), State: st.State.String(), Reason: st.Reason,
			Filter: s.Family().Name, Capacity: st.Filter.Capacity, Items: st.Filter.Items, Bytes: st.Filter.Bytes,
			Lookups: st.Lookups, Absent: st.Absent, FailOpen: st.FailOpen, Confirms: s.Confirms(),
			ObservedFP: st.EmptyFetches, ObservedFPRate: st.ObservedFPRate, HasConfirm: s.HasConfirm(),
			Mode: rd.Mode, Role: rd.Role, Position: rd.Position, LagSeconds: rd.LagSeconds,
			TargetFPRate: st.ConfiguredFPRate, FillRatio: st.Filter.FillRatio, Builds: st.Builds,
			EstimatedFPRate: st.Filter.EstimatedFPRate, Generation: st.Generation, Swaps: st.Swaps, LastSwap: rfc3339(st.LastSwap),
		}, true
	}
	all, err := a.store.Info(name)
	if err != nil {
		return SetInfo{}, false
	}
	switch all.Kind {
	case serve.KindBloom:
		bi := all.Bloom
		return SetInfo{Name: name, Kind: "bloom", Ready: true, Capacity: bi.Capacity, Items: bi.Items, Bytes: bi.Size, Filters: bi.Filters}, true
	case serve.KindCuckoo:
		ci := all.Cuckoo
		return SetInfo{Name: name, Kind: "cuckoo", Ready: true, Capacity: ci.Capacity, Items: ci.Inserted - min(ci.Deleted, ci.Inserted), Bytes: ci.Size, Filters: ci.Filters}, true
	case serve.KindExpiring:
		return a.expiringInfo(name)
	}
	return SetInfo{}, false
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	out := []SetInfo{}
	for _, name := range a.store.Keys() {
		if info, ok := a.info(name); ok {
			out = append(out, info)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"sets": out})
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	info, ok := a.info(r.PathValue("name"))
	if !ok {
		writeServeError(w, serve.ErrNotFound)
		return
	}
	writeJSON(w, http.StatusOK, info)
}

func (a *api) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, a.cfg.MaxBodyBytes))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_request", "bad JSON body: "+err.Error())
		return false
	}
	return true
}

func (a *api) create(w http.ResponseWriter, r *http.Request) {
	var spec FilterSpec
	if !a.decode(w, r, &spec) {
		return
	}
	name := r.PathValue("name")
	rate := 0.0 // the default
	if spec.ErrorRate != nil {
		if rate = *spec.ErrorRate; !(rate > 0 && rate < 1) {
			writeServeError(w, serve.ErrBadErrorRate)
			return
		}
	}
	var err error
	switch strings.ToLower(spec.Kind) {
	case "", "bloom":
		p := serve.BloomParams{Capacity: spec.Capacity, ErrorRate: rate, NonScaling: spec.NonScaling}
		if spec.Expansion < 0 {
			writeError(w, http.StatusBadRequest, "bad_argument", "expansion must be >= 0")
			return
		}
		p.Expansion = uint32(min(spec.Expansion, 1<<20))
		if p.NonScaling {
			p.Expansion = 0
		}
		err = a.store.Reserve(name, p)
	case "cuckoo":
		p := serve.CuckooParams{Capacity: spec.Capacity, BucketSize: spec.BucketSize, Expansion: spec.Expansion}
		err = a.store.Reserve(name, p)
	case "expiring":
		err = a.createExpiring(name, spec, rate)
	default:
		writeError(w, http.StatusBadRequest, "bad_argument", "kind must be bloom, cuckoo or expiring")
		return
	}
	if err != nil {
		writeServeError(w, err)
		return
	}
	info, _ := a.info(name)
	writeJSON(w, http.StatusCreated, info)
}

func (a *api) del(w http.ResponseWriter, r *http.Request) {
	n, err := a.store.Delete([]string{r.PathValue("name")})
	if err != nil {
		writeServeError(w, err)
		return
	}
	if n == 0 {
		writeServeError(w, serve.ErrNotFound)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"deleted": true})
}

// mayContain answers for any kind of key.
func (a *api) mayContain(name string, keys [][]byte) []bool {
	held, _ := a.store.MayContain(name, keys)
	return held
}

func keyParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	if !r.URL.Query().Has("key") {
		writeError(w, http.StatusBadRequest, "bad_request", "query parameter key is required")
		return "", false
	}
	return r.URL.Query().Get("key"), true
}

func (a *api) contains(w http.ResponseWriter, r *http.Request) {
	key, ok := keyParam(w, r)
	if !ok {
		return
	}
	pos, at, ok := a.atParam(w, r)
	if !ok {
		return
	}
	if at {
		may, err := a.store.MayContainAt(r.PathValue("name"), []byte(key), pos)
		if err != nil {
			writeServeError(w, err)
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"key": key, "may_contain": may})
		return
	}
	res := a.mayContain(r.PathValue("name"), [][]byte{[]byte(key)})
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "may_contain": res[0]})
}

type keysBody struct {
	Keys []string `json:"keys"`
	// An expiring key's adds take one of these (seconds, fractions allowed).
	TTLSeconds *float64 `json:"ttl_seconds,omitempty"`
	ExpiresAt  *float64 `json:"expires_at,omitempty"` // Unix seconds
}

func toBytes(keys []string) [][]byte {
	out := make([][]byte, len(keys))
	for i, k := range keys {
		out[i] = []byte(k)
	}
	return out
}

func (a *api) containsMany(w http.ResponseWriter, r *http.Request) {
	var body keysBody
	if !a.decode(w, r, &body) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"results": a.mayContain(r.PathValue("name"), toBytes(body.Keys))})
}

func (a *api) exists(w http.ResponseWriter, r *http.Request) {
	key, ok := keyParam(w, r)
	if !ok {
		return
	}
	pos, at, ok := a.atParam(w, r)
	if !ok {
		return
	}
	var found bool
	var err error
	if at {
		found, err = a.store.HasAt(r.Context(), r.PathValue("name"), key, pos)
	} else {
		found, err = a.store.Has(r.Context(), r.PathValue("name"), key)
	}
	if err != nil {
		writeServeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "exists": found})
}

func (a *api) add(w http.ResponseWriter, r *http.Request) {
	var body keysBody
	if !a.decode(w, r, &body) {
		return
	}
	name := r.PathValue("name")
	keys := toBytes(body.Keys)
	if a.store.Type(name) == serve.KindExpiring || body.TTLSeconds != nil || body.ExpiresAt != nil {
		a.addExpiring(w, name, keys, body)
		return
	}
	if a.store.Type(name) == serve.KindCuckoo {
		res, full, err := a.store.Insert(name, keys, serve.InsertOptions{NoCreate: true})
		if err != nil {
			writeServeError(w, err)
			return
		}
		added := make([]bool, len(res))
		for i, v := range res {
			added[i] = v == serve.Inserted
		}
		if full != nil {
			writeJSON(w, http.StatusInsufficientStorage, map[string]any{"added": added,
				"error": map[string]string{"code": "full", "message": full.Error()}})
			return
		}
		writeJSON(w, http.StatusOK, map[string]any{"added": added})
		return
	}
	added, stop, err := a.store.Add(name, keys, serve.AddOptions{NoCreate: true})
	if err != nil {
		writeServeError(w, err)
		return
	}
	if stop != nil {
		writeJSON(w, http.StatusInsufficientStorage, map[string]any{"added": added,
			"error": map[string]string{"code": "full", "message": stop.Error()}})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"added": added})
}

func (a *api) remove(w http.ResponseWriter, r *http.Request) {
	key, ok := keyParam(w, r)
	if !ok {
		return
	}
	name := r.PathValue("name")
	if a.store.Type(name) == serve.KindBloom {
		writeServeError(w, serve.ErrRemoveFailed)
		return
	}
	removed, err := a.store.Remove(name, []byte(key))
	if err != nil {
		writeServeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]bool{"removed": removed})
}
