package serve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/prometheus/client_golang/prometheus"
)

// Mode says how a table-backed set learns of the table's rows.
type Mode uint8

const (
	// ModeRebuild: the set reads the table at start and again on its
	// rebuild triggers (RebuildInterval, overfill). Rows written by others
	// in between are not in the filter, so BF.EXISTS may answer 0 for them
	// until the next rebuild, and BG.EXISTS always asks the confirm query.
	// Chosen in the config with "follow no"; SQLite sets are always in it.
	ModeRebuild Mode = iota
	// ModeFollow: the set follows the table's change feed (its Keeper):
	// every row any writer commits reaches the filter within the feed's
	// lag, deletes included where the filter can remove.
	ModeFollow
)

func (m Mode) String() string {
	if m == ModeFollow {
		return "follow"
	}
	return "rebuild"
}

// Role is this process's part in keeping a followed set in step.
type Role uint8

const (
	// RoleNone: the set is not followed (ModeRebuild).
	RoleNone Role = iota
	// RoleFollower: this process follows the database's change feed itself,
	// with no fan-out.
	RoleFollower
	// RoleFeeder: this process holds the fan-out's lease: it follows the
	// database and publishes to the stream, and serves as an instance.
	RoleFeeder
	// RoleStandby: this process may become the feeder (it has database
	// credentials) and waits for the lease; it serves as an instance.
	RoleStandby
	// RoleInstance: this process only follows the stream.
	RoleInstance
)

func (r Role) String() string {
	switch r {
	case RoleFollower:
		return "follower"
	case RoleFeeder:
		return "feeder"
	case RoleStandby:
		return "standby"
	case RoleInstance:
		return "instance"
	}
	return "none"
}

// Keeper keeps a table-backed set's gate in step with its table in place of
// the gate's own rebuilds (Gate.Run): a change feed (Gate.Follow over
// source/postgres.Feed) or a fan-out instance with an optional feeder.
type Keeper interface {
	// Run keeps g in step until ctx is done, and returns ctx's error (or
	// bloomgate.ErrClosed).
	Run(ctx context.Context, g *bloomgate.Gate) error
	// Role reports this process's part now. It must not block.
	Role() Role
}

// SetStatus is a table-backed set's state for readiness probes and INFO
// (Store.SetStatus), of an expiring set too.
type SetStatus struct {
	Mode   Mode
	Role   Role
	State  bloomgate.State
	Reason string // why the set is not ready ("" when it is)
	// Ready reports whether the filter answers "absent" now.
	Ready bool
	// Position is the change-feed position applied (0 in ModeRebuild);
	// Lag how far it is behind the feed's head.
	Position changefeed.Position
	Lag      time.Duration
	// Generation is the serving filter's (bloomgate.Stats.Generation); 0
	// for an expiring set.
	Generation uint64
	// Expiring is set for an expiring set (SetConfig.Expiring) only.
	Expiring *ExpiringStatus
}

// Errors of read-your-writes lookups.
var (
	// ErrNoPosition: the set does not follow a change feed, so a position
	// cannot be honoured; use BG.EXISTS (it confirms every answer).
	ErrNoPosition = &Error{Code: CodeNoPosition, Msg: "set does not follow a change feed (follow no): it has no position"}
	// ErrBadPosition: the position is not a decimal integer. A store whose
	// Config.Positions has a notation of its own returns an error of the
	// same Code (CodeBadPosition) naming that notation too.
	ErrBadPosition = badPosition(changefeed.Decimal)
)

// badPosition is the error of a position in neither notation n nor decimal.
func badPosition(n changefeed.Notation) *Error {
	msg := "position is not " + changefeed.Decimal.String()
	if n != changefeed.Decimal {
		msg = "position is not " + n.String() + " or " + changefeed.Decimal.String()
	}
	return &Error{Code: CodeBadPosition, Msg: msg}
}

// ParsePosition parses a client's read-your-writes position: in the
// store's notation (Config.Positions) or as a decimal integer. Its error has
// CodeBadPosition.
func (s *Store) ParsePosition(text string) (changefeed.Position, error) {
	if p, err := s.cfg.Positions.Parse(text); err == nil {
		return p, nil
	}
	if p, err := changefeed.ParsePosition(text); err == nil {
		return p, nil
	}
	return 0, s.badPosition
}

// FormatPosition writes p in the store's notation (Config.Positions).
func (s *Store) FormatPosition(p changefeed.Position) string { return s.cfg.Positions.Format(p) }

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
	// Expiring, if set, makes this an expiring set: an expiring key built
	// from the table's keys and expiries (see ExpiringConfig), in place of
	// a gate. Only Name and Family (nil or filter.FamilyWindowed) may be
	// set besides it. Default: nil.
	Expiring *ExpiringConfig
	// Source streams the table's keys. Required without a Keeper; a
	// Keeper's set may have none (an instance that starts from the fan-out's
	// snapshots never reads the table).
	Source bloomgate.Source
	// Keeper, if set, keeps the set in step (ModeFollow) instead of the
	// gate's rebuilds from Source (ModeRebuild). Default: nil.
	Keeper Keeper
	// Confirm, if set, answers BG.EXISTS exactly: after the filter says
	// "maybe" in ModeFollow, for every key in ModeRebuild. It receives the
	// key as the client sent it.
	Confirm Confirmer
	// Family is the filter: any family with a constructor for a gate
	// (filter.Family.New). filter.FamilyBloom does not apply removes (the
	// key stays a false positive until the next rebuild); filter.FamilyCuckoo
	// does, and grows to setMaxFilters sub-filters before it refuses keys.
	// Default: filter.FamilyBloom.
	Family *filter.Family
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

// GateConfig returns the Config of the set's gate (log may be nil), for a
// Keeper that needs a second gate built the same way (a fan-out feeder's).
// The Registerer is left out: only the serving gate exports metrics.
func (sc SetConfig) GateConfig(log *slog.Logger) bloomgate.Config {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg := gateConfig(sc, log)
	cfg.Registerer = nil
	return cfg
}

// gateConfig is the one place a gate's Config is built.
func gateConfig(sc SetConfig, log *slog.Logger) bloomgate.Config {
	src := sc.Source
	if src == nil {
		src = noSource{}
	}
	cfg := bloomgate.Config{
		Source:          src,
		Capacity:        sc.Capacity,
		FPRate:          sc.FPRate,
		Normalizer:      sc.Normalizer,
		Logger:          log.With("set", sc.Name),
		RebuildInterval: sc.RebuildInterval,
	}
	if sc.Registerer != nil {
		cfg.Registerer = prometheus.WrapRegistererWith(prometheus.Labels{"set": sc.Name}, sc.Registerer)
	}
	cfg.NewFilter = bloomgate.FamilyFilter(sc.family(), setMaxFilters)
	return cfg
}

// openSets declares cfg.Sets and starts them; called by Open after
// recovery, so an expiring set finds a stored key of its name. On error the
// caller closes the sets opened so far (closeSets). Every set runs until the
// store stops (Close: runCtx cancelled, then bgDone waited for), and then the
// gates are closed (closeSets); an expiring set has nothing more to release.
func (s *Store) openSets() error {
	var expiring []*object
	for _, sc := range s.cfg.Sets {
		switch {
		case sc.Name == "":
			return errors.New("serve: set without a name")
		case s.sets[sc.Name] != nil || slices.ContainsFunc(expiring, func(o *object) bool { return o.name == sc.Name }):
			return fmt.Errorf("serve: set %q declared twice", sc.Name)
		}
		if sc.Expiring != nil {
			if sc.Source != nil || sc.Keeper != nil || sc.Confirm != nil || (sc.Family != nil && sc.Family != filter.FamilyWindowed) {
				return fmt.Errorf("serve: expiring set %q takes its source and feed in Expiring, and no confirm query or other family", sc.Name)
			}
			if err := s.openExpiringSet(sc.Name, *sc.Expiring); err != nil {
				return err
			}
			expiring = append(expiring, s.keys[sc.Name])
			continue
		}
		set, err := newSet(sc, s.log)
		if err != nil {
			return err
		}
		s.sets[sc.Name] = set
	}
	for _, set := range s.sets {
		s.bgDone.Add(1)
		go func() {
			defer s.bgDone.Done()
			set.run(s.runCtx)
		}()
	}
	for _, o := range expiring {
		s.bgDone.Add(1)
		go func() {
			defer s.bgDone.Done()
			s.runExpiringSet(s.runCtx, o)
		}()
	}
	return nil
}

// SetNames returns the names of the table-backed sets, expiring ones
// included, sorted.
func (s *Store) SetNames() []string {
	names := make([]string, 0, len(s.sets))
	for name := range s.sets {
		names = append(names, name)
	}
	s.mu.RLock()
	for name, o := range s.keys {
		if o.table() != nil {
			names = append(names, name)
		}
	}
	s.mu.RUnlock()
	slices.Sort(names)
	return names
}

// SetStatus returns the status of the table-backed set name (expiring or
// not), and false when name is not one. It reads a gate's counters
// (O(filter size)); call it for probes, not per lookup.
func (s *Store) SetStatus(name string) (SetStatus, bool) {
	if set := s.sets[name]; set != nil {
		return set.Status(), true
	}
	if o := s.expiringSet(name); o != nil {
		return s.expiringStatus(o), true
	}
	return SetStatus{}, false
}

func newSet(sc SetConfig, log *slog.Logger) (*Set, error) {
	switch {
	case sc.Name == "":
		return nil, errors.New("serve: set without a name")
	case sc.Source == nil && sc.Keeper == nil:
		return nil, fmt.Errorf("serve: set %q has no source", sc.Name)
	case sc.family().New == nil:
		return nil, fmt.Errorf("serve: set %q: filter family %v cannot back a set", sc.Name, sc.Family)
	}
	g, err := bloomgate.New(gateConfig(sc, log))
	if err != nil {
		return nil, fmt.Errorf("serve: set %q: %w", sc.Name, err)
	}
	return &Set{cfg: sc, gate: g}, nil
}

// Name returns the set's name.
func (t *Set) Name() string { return t.cfg.Name }

// Family returns the set's filter family.
func (t *Set) Family() *filter.Family { return t.cfg.family() }

// setMaxFilters is how many sub-filters a set's cuckoo filter grows to
// (filter.FamilyConfig.MaxFilters) before it refuses keys and the set fails
// open until a rebuild.
const setMaxFilters = 8

func (sc SetConfig) family() *filter.Family {
	if sc.Family == nil {
		return filter.FamilyBloom
	}
	return sc.Family
}

// HasConfirm reports whether the set has a confirm query.
func (t *Set) HasConfirm() bool { return t.cfg.Confirm != nil }

// Ready reports whether the set's filter is authoritative.
func (t *Set) Ready() bool { return t.gate.Ready() }

// Mode reports how the set learns of the table's rows.
func (t *Set) Mode() Mode {
	if t.cfg.Keeper != nil {
		return ModeFollow
	}
	return ModeRebuild
}

// Status reports the set's mode, role, state, position and lag. It reads
// the gate's counters, not its filter (Gate.Counters): /readyz is polled,
// and a pass over a large filter takes milliseconds.
func (t *Set) Status() SetStatus {
	st := t.gate.Counters()
	s := SetStatus{Mode: t.Mode(), State: st.State, Reason: st.Reason, Ready: t.gate.Ready(), Generation: st.Generation}
	if t.cfg.Keeper != nil {
		s.Role = t.cfg.Keeper.Role()
		s.Position, s.Lag = t.gate.Position(), st.FeedLag
	}
	if !s.Ready && s.Reason == "" {
		// Authoritative state but stale: a followed gate whose lag was not
		// checked within MaxLag (the process was paused, or Follow stopped).
		s.Reason = "change feed: lag not checked within MaxLag"
		if st.State == bloomgate.StateWarming {
			s.Reason = "warming"
		}
	}
	return s
}

// Stats returns the gate's counters (O(filter size)).
func (t *Set) Stats() bloomgate.Stats { return t.gate.Stats() }

// Confirms returns how many BG.EXISTS calls ran the confirm query.
func (t *Set) Confirms() uint64 { return t.confirms.Load() }

func (t *Set) run(ctx context.Context) {
	if t.cfg.Keeper != nil {
		_ = t.cfg.Keeper.Run(ctx, t.gate) // returns ctx's error
		return
	}
	_ = t.gate.Run(ctx) // returns ctx's error
}

// noSource is the Source of a set whose Keeper never reads the table: the
// gate needs one, and only Run (not used with a Keeper) would scan it.
type noSource struct{}

var errNoSource = errors.New("serve: this set has no database connection; it starts from the fan-out's snapshots")

func (noSource) Scan(context.Context, func([]byte) error) error { return errNoSource }
func (noSource) Estimate(context.Context) (int64, error)        { return 0, nil }

func (t *Set) close() { t.gate.Close() }

func (t *Set) mayContain(items [][]byte, out []bool) {
	t.gate.MayContainMany(items, out) // batched: the keys' cache misses overlap
}

// add adds items to the gate in one batch (Gate.AddMany): added[i] is true
// when the gate would have reported item i absent just before adding it, as
// a MayContain and then an Add per item, one after the other, would answer.
// A refused item ends the batch.
// The replies go into buf, len(items) long.
func (t *Set) add(items [][]byte, buf []bool) ([]bool, error, error) {
	added := buf
	n, err := t.gate.AddMany(items, added)
	added = added[:n]
	if err != nil {
		return added, &Error{Code: CodeAddFailed, Msg: err.Error()}, nil
	}
	return added, nil, nil
}

// addCuckoo adds items to the gate one by one for Insert. An item the gate
// refuses is InsertNoRoom, and full says why (the first refusal).
func (t *Set) addCuckoo(items [][]byte, nx bool) (res []InsertResult, full, err error) {
	res = make([]InsertResult, len(items))
	for i, it := range items {
		if nx && t.gate.MayContain(it) {
			continue // InsertSkipped
		}
		if err := t.gate.Add(it); err != nil {
			res[i] = InsertNoRoom
			if full == nil {
				full = &Error{Code: CodeAddFailed, Msg: err.Error()}
			}
			continue
		}
		res[i] = Inserted
	}
	return res, full, nil
}

func (t *Set) remove(item []byte) (bool, error) {
	return t.gate.Remove(item) == nil, nil
}

// MayContainAt reports false only if item is definitely not in the set as
// of position pos: every transaction that ended at or before pos has been
// applied (read-your-writes: pos is the writer's
// pg_current_wal_insert_lsn() taken after its commit). While the set has
// not applied pos, or its lag was not checked within MaxLag, it reports
// true. A set in ModeRebuild has no position: ErrNoPosition.
func (s *Store) MayContainAt(name string, item []byte, pos changefeed.Position) (bool, error) {
	t := s.sets[name]
	if t == nil {
		return false, ErrNotSet
	}
	if t.cfg.Keeper == nil {
		return false, ErrNoPosition
	}
	return t.gate.MayContainAt(item, pos), nil
}

// Has answers exactly whether key is in the table-backed set name.
// In ModeFollow: the filter first, then, on "maybe" (or while the set is
// not ready), the confirm query; "absent" from the filter covers every row
// committed more than the set's lag ago (HasAt covers a given
// position). In ModeRebuild the filter cannot know of rows written since
// its last build, so every key goes to the confirm query. A confirm that
// finds nothing after a "maybe" is counted as an observed false positive in
// the set's stats.
func (s *Store) Has(ctx context.Context, name, key string) (bool, error) {
	return s.bgExists(ctx, name, key, 0, false)
}

// HasAt is Has as of position pos (see MayContainAt): the filter answers
// "absent" only once the set has applied pos. A set in ModeRebuild confirms
// every key, as Has does.
func (s *Store) HasAt(ctx context.Context, name, key string, pos changefeed.Position) (bool, error) {
	return s.bgExists(ctx, name, key, pos, true)
}

func (s *Store) bgExists(ctx context.Context, name, key string, pos changefeed.Position, at bool) (bool, error) {
	t := s.sets[name]
	if t == nil {
		return false, ErrNotSet
	}
	if t.cfg.Confirm == nil {
		return false, ErrNoConfirm
	}
	confirm := func(ctx context.Context) (struct{}, bool, error) {
		t.confirms.Add(1)
		ok, err := t.cfg.Confirm.Exists(ctx, key)
		return struct{}{}, ok, err
	}
	var found bool
	var err error
	switch {
	case t.cfg.Keeper == nil:
		_, found, err = confirm(ctx)
	case at && t.gate.MayContainAt(stringBytes(key), pos):
		_, found, err = confirm(ctx)
	case at:
		return false, nil
	default:
		_, found, err = bloomgate.Lookup(ctx, t.gate, key, confirm)
	}
	if err != nil {
		return false, &Error{Code: CodeConfirmFailed, Msg: "confirm query failed: " + err.Error()}
	}
	return found, nil
}

func stringBytes(s string) []byte { return []byte(s) }
