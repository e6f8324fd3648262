package httpapi

import (
	"math"
	"net/http"
	"time"

	"github.com/bloomgate/bloomgate/serve"
)

// Expiring keys over HTTP:
//
//	PUT  /v1/sets/{name}       {"kind":"expiring","max_ttl_seconds":S,"capacity":N,"error_rate":P,"generations":G}
//	POST /v1/sets/{name}/keys  {"keys":[…],"ttl_seconds":T} or {"keys":[…],"expires_at":UNIX_SECONDS}
//	                           → {"added":[bool…]}
//	GET  /v1/sets/{name}/contains?key=K, POST /v1/sets/{name}/contains, GET and
//	DELETE /v1/sets/{name}: as for any key.

// ExpiringInfo is the "expiring" part of an expiring key's SetInfo.
type ExpiringInfo struct {
	MaxTTLSeconds      int64   `json:"max_ttl_seconds"`
	ErrorRate          float64 `json:"error_rate"`
	Generations        int     `json:"generations"`
	MaxGenerations     int     `json:"max_generations"`
	GenerationCapacity uint64  `json:"generation_capacity"`
	MaxBytes           uint64  `json:"max_bytes"`
	// TableBacked is set for a table-backed expiring set.
	TableBacked bool `json:"table_backed,omitempty"`
	// NextExpiryUnixMs is when the oldest generation is dropped; absent
	// when none is held.
	NextExpiryUnixMs int64 `json:"next_expiry_unix_ms,omitempty"`
}

func (a *api) createExpiring(name string, spec FilterSpec, rate float64) error {
	if spec.MaxTTLSeconds < 1 || spec.MaxTTLSeconds > math.MaxInt64/int64(time.Second) {
		return &serve.Error{Code: serve.CodeBadArgument, Param: serve.ParamMaxTTL, Msg: "max_ttl_seconds must be at least 1"}
	}
	return a.store.Reserve(name, serve.ExpiringParams{
		MaxTTL:      time.Duration(spec.MaxTTLSeconds) * time.Second,
		Capacity:    spec.Capacity,
		ErrorRate:   rate,
		Generations: spec.Generations,
	})
}

func (a *api) expiringInfo(name string) (SetInfo, bool) {
	all, err := a.store.Info(name)
	if err != nil || all.Kind != serve.KindExpiring {
		return SetInfo{}, false
	}
	xi := all.Expiring
	e := &ExpiringInfo{
		MaxTTLSeconds: int64(xi.Params.MaxTTL / time.Second), ErrorRate: xi.Params.ErrorRate,
		Generations: xi.Generations, MaxGenerations: xi.Params.Generations,
		GenerationCapacity: xi.GenerationCapacity, MaxBytes: xi.MaxSize,
	}
	if !xi.NextExpiry.IsZero() {
		e.NextExpiryUnixMs = xi.NextExpiry.UnixMilli()
	}
	info := SetInfo{Name: name, Kind: "expiring", Ready: true, Capacity: xi.Params.Capacity, Items: xi.Items,
		Bytes: xi.Size, Filters: xi.Generations, Expiring: e}
	if sr, ok := a.expiringSetReadiness(name); ok { // table-backed: ready after its first scan and, following the feed, while fresh
		e.TableBacked = true
		info.Ready, info.State, info.Reason = sr.Ready, sr.State, sr.Reason
		info.Mode, info.Role, info.Position, info.LagSeconds = sr.Mode, sr.Role, sr.Position, sr.LagSeconds
	}
	return info, true
}

// maxExpirySeconds bounds the seconds an expiry may give (a thousand years),
// so that converting it cannot overflow.
const maxExpirySeconds = 1000 * 366 * 24 * 3600

func (a *api) addExpiring(w http.ResponseWriter, name string, keys [][]byte, body keysBody) {
	var exp time.Time
	switch {
	case (body.TTLSeconds == nil) == (body.ExpiresAt == nil):
		writeError(w, http.StatusBadRequest, "bad_argument", "an expiring key's add takes exactly one of ttl_seconds and expires_at")
		return
	case body.TTLSeconds != nil:
		ttl := *body.TTLSeconds
		if !(ttl > 0 && ttl <= maxExpirySeconds) {
			writeError(w, http.StatusBadRequest, "bad_argument", "ttl_seconds must be > 0")
			return
		}
		exp = a.store.Now().Add(time.Duration(ttl * float64(time.Second)))
	default:
		at := *body.ExpiresAt
		if !(at > 0 && at <= maxExpirySeconds) {
			writeError(w, http.StatusBadRequest, "bad_argument", "expires_at must be a Unix time in seconds")
			return
		}
		sec, frac := math.Modf(at)
		exp = time.Unix(int64(sec), int64(frac*float64(time.Second)))
	}
	added, err := a.store.AddUntil(name, keys, exp)
	if err != nil {
		writeServeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"added": added})
}

// expiringSetReadiness describes a table-backed expiring set as /readyz
// does; ok is false for a key that is not one.
func (a *api) expiringSetReadiness(name string) (SetReadiness, bool) {
	st, ok := a.store.SetStatus(name)
	if !ok || st.Expiring == nil {
		return SetReadiness{}, false
	}
	return a.readiness(st), true
}
