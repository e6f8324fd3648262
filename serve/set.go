package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/prometheus/client_golang/prometheus"
)

// Confirmer answers exactly whether a key exists in a table: the confirm
// query of a table-backed set (source/postgres.Confirm, source/sqlite.Confirm).
type Confirmer interface {
	Exists(ctx context.Context, key string) (bool, error)
}

// SetConfig declares a table-backed set. The zero value of every field but
// Name and Source means its default.
type SetConfig struct {
	// Name is the key clients use. Required.
	Name string
	// Source streams the table's keys. Required.
	Source bloomgate.Source
	// Confirm, if set, answers BG.EXISTS exactly after the filter says
	// "maybe". It receives the key as the client sent it.
	Confirm Confirmer
	// Kind is the filter: "bloom" (a blocked Bloom filter; removes are not
	// applied, the key stays a false positive until the next rebuild) or
	// "cuckoo" (removes apply at once). Default: "bloom".
	Kind string
	// FPRate is the target false-positive rate. Default: the gate's (0.001).
	FPRate float64
	// Capacity sizes the filter. Default: the gate's ((1 + Headroom) × the
	// table's estimated rows, Headroom 0.25).
	Capacity uint64
	// Normalizer maps keys on every path. Default: bloomgate.Exact.
	Normalizer bloomgate.Normalizer
	// RebuildInterval rebuilds the filter from the table this often.
	// Default: 0, only when the gate's triggers fire.
	RebuildInterval time.Duration
	// Registerer receives the gate's metrics, labelled set=<Name>.
	// Default: none.
	Registerer prometheus.Registerer
}

// Set is a table-backed set: a bloomgate.Gate over a table.
type Set struct {
	cfg  SetConfig
	gate *bloomgate.Gate
	// confirms counts BG.EXISTS calls answered by the confirm query.
	confirms atomic.Uint64
}

// gateConfig is the one place a gate's Config is built.
func gateConfig(sc SetConfig, log *slog.Logger) bloomgate.Config {
	cfg := bloomgate.Config{
		Source:          sc.Source,
		Capacity:        sc.Capacity,
		FPRate:          sc.FPRate,
		Normalizer:      sc.Normalizer,
		Logger:          log.With("set", sc.Name),
		RebuildInterval: sc.RebuildInterval,
	}
	if sc.Registerer != nil {
		cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"set": sc.Name}, sc.Registerer)
	}
	if sc.Kind == "cuckoo" {
		cfg.NewFilter = func(capacity uint64, fpRate float64, seed uint64) (bloomgate.Filter, error) {
			return filter.NewCuckoo(filter.CuckooConfig{Capacity: capacity, FPRate: fpRate, MaxFilters: 8, Seed: seed})
		}
	}
	return cfg
}

func newSet(sc SetConfig, log *slog.Logger) (*Set, error) {
	switch {
	case sc.Name == "":
		return nil, errors.New("serve: set without a name")
	case sc.Source == nil:
		return nil, fmt.Errorf("serve: set %q has no source", sc.Name)
	case sc.Kind != "" && sc.Kind != "bloom" && sc.Kind != "cuckoo":
		return nil, fmt.Errorf("serve: set %q: kind %q (want bloom or cuckoo)", sc.Name, sc.Kind)
	}
	g, err := bloomgate.New(gateConfig(sc, log))
	if err != nil {
		return nil, fmt.Errorf("serve: set %q: %w", sc.Name, err)
	}
	return &Set{cfg: sc, gate: g}, nil
}

// Name returns the set's name.
func (t *Set) Name() string { return t.cfg.Name }

// Kind returns the filter kind ("bloom" or "cuckoo").
func (t *Set) Kind() string {
	if t.cfg.Kind == "" {
		return "bloom"
	}
	return t.cfg.Kind
}

// HasConfirm reports whether the set has a confirm query.
func (t *Set) HasConfirm() bool { return t.cfg.Confirm != nil }

// Ready reports whether the set's filter is authoritative.
func (t *Set) Ready() bool { return t.gate.Ready() }

// Stats returns the gate's counters (O(filter size)).
func (t *Set) Stats() bloomgate.Stats { return t.gate.Stats() }

// Confirms returns how many BG.EXISTS calls ran the confirm query.
func (t *Set) Confirms() uint64 { return t.confirms.Load() }

func (t *Set) run(ctx context.Context) {
	_ = t.gate.Run(ctx) // returns ctx's error
}

func (t *Set) close() { t.gate.Close() }

func (t *Set) mayContain(items [][]byte, out []bool) {
	t.gate.MayContainMany(items, out) // batched: the keys' cache misses overlap
}

func (t *Set) add(items [][]byte) ([]bool, error, error) {
	added := make([]bool, 0, len(items))
	for _, it := range items {
		was := t.gate.MayContain(it)
		if err := t.gate.Add(it); err != nil {
			return added, &Error{"add_failed", "ERR " + err.Error()}, nil
		}
		added = append(added, !was)
	}
	return added, nil, nil
}

func (t *Set) addCuckoo(items [][]byte, nx bool) ([]int, error, error) {
	res := make([]int, len(items))
	for i, it := range items {
		if nx && t.gate.MayContain(it) {
			continue
		}
		if err := t.gate.Add(it); err != nil {
			res[i] = -1
			continue
		}
		res[i] = 1
	}
	return res, nil, nil
}

func (t *Set) remove(item []byte) (bool, error) {
	return t.gate.Remove(item) == nil, nil
}

// BGExists answers exactly whether key is in the table-backed set name: the
// filter first, then, on "maybe" (or while the set is not ready), the
// confirm query. A confirm that finds nothing after a "maybe" is counted as
// an observed false positive in the set's stats.
func (s *Store) BGExists(ctx context.Context, name, key string) (bool, error) {
	t := s.sets[name]
	if t == nil {
		return false, ErrNotSet
	}
	if t.cfg.Confirm == nil {
		return false, ErrNoConfirm
	}
	_, found, err := bloomgate.Lookup(ctx, t.gate, key, func(ctx context.Context) (struct{}, bool, error) {
		t.confirms.Add(1)
		ok, err := t.cfg.Confirm.Exists(ctx, key)
		return struct{}{}, ok, err
	})
	if err != nil {
		return false, &Error{"confirm_failed", "ERR confirm query failed: " + err.Error()}
	}
	return found, nil
}
