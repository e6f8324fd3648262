package serve

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// Kind is the kind of a key: its tag in the log and snapshots (see
// record.go), and the family of the filter it holds (Kind.Family, from the
// registry filter.Families).
type Kind uint8

// Key kinds.
const (
	KindNone   Kind = 0
	KindBloom  Kind = 1 // a scalable Bloom filter (BF.*)
	KindCuckoo Kind = 2 // a cuckoo filter (CF.*)
	KindSet    Kind = 3 // a table-backed set
	// KindExpiring is a filter whose items expire (BG.X*, filter.Windowed).
	KindExpiring Kind = 4
)

// keyKind describes one kind of key: its name, its filter family, and, for
// a kind stored in the log and snapshots, how to read its parameters and
// filter back. keyKinds is indexed by Kind; each kind's type (bloomKey,
// cuckooKey, expiringKey) does the rest.
type keyKind struct {
	name   string
	family *filter.Family // nil: KindNone, KindSet (a set has its own, Set.Family)
	// metaLen is the bytes of the kind's meta after its tag (see appendMeta);
	// decodeSpec reads them, decodeKey the filter of an opPut record whose
	// parameters are spec. Nil for a kind never stored.
	metaLen    int
	decodeSpec func(d *decoder) Spec
	decodeKey  func(rd io.Reader, cfg filter.DecodeConfig, spec Spec, now func() time.Time) (keyFilter, error)
}

var keyKinds = [...]keyKind{
	KindNone:     {name: "none"},
	KindBloom:    {name: "bloom", family: filter.FamilyScalable, metaLen: 21, decodeSpec: decodeBloomSpec, decodeKey: decodeBloomKey},
	KindCuckoo:   {name: "cuckoo", family: filter.FamilyCuckoo, metaLen: 21, decodeSpec: decodeCuckooSpec, decodeKey: decodeCuckooKey},
	KindSet:      {name: "set"},
	KindExpiring: {name: "expiring", family: filter.FamilyWindowed, metaLen: expiringMetaLen, decodeSpec: decodeExpiringSpec, decodeKey: decodeExpiringKey},
}

// stored returns the description of k when keys of kind k are stored, else
// nil.
func (k Kind) stored() *keyKind {
	if int(k) < len(keyKinds) && keyKinds[k].decodeSpec != nil {
		return &keyKinds[k]
	}
	return nil
}

func (k Kind) String() string {
	if int(k) < len(keyKinds) {
		return keyKinds[k].name
	}
	return "none"
}

// Family returns the filter family a key of kind k holds: filter.Scalable
// for KindBloom (a set reports its own, Set.Family), filter.Cuckoo for
// KindCuckoo, filter.Windowed for KindExpiring; nil for KindNone and KindSet.
func (k Kind) Family() *filter.Family {
	if int(k) < len(keyKinds) {
		return keyKinds[k].family
	}
	return nil
}

// keyFilter is a standalone key's filter with its parameters and counters:
// each kind of key is one type (*bloomKey, *cuckooKey, *expiringKey), and
// an object holds one. What every kind answers is a method here; a verb
// that only one kind answers (Add, Insert, Remove, AddUntil) finds its type
// by assertion, and a key of another kind is ErrWrongType.
//
// Call the methods with the object's mutex held, except kind, spec,
// mayContain and count, which never lock (the filters' lookups are safe
// beside their writes).
type keyFilter interface {
	kind() Kind
	// spec is the parameters the key was created with, defaults filled in.
	spec() Spec
	// subFilters is the number of sub-filters (or generations): the size
	// changes only when it does.
	subFilters() int
	sizeBytes() int64
	mayContain(now func() time.Time, items [][]byte, out []bool)
	// count is how many copies of item the key may hold (see Store.Count).
	count(now func() time.Time, item []byte) int
	info() Info
	writeFilter(w io.Writer) error
	// counters are the card and deletes fields of the key's opPut record
	// (see record.go); setCounters restores them from one.
	counters() (card, deletes uint64)
	setCounters(card, deletes uint64) error
	// replayHashes applies an opAdd, opAddNX or opRemove record with the
	// rules of the command that wrote it (see record.go).
	replayHashes(op byte, hashes []uint64)
	// expire drops what ended by the clock and returns how much it dropped
	// (an expiring key's generations; 0 for the others).
	expire() int
}

var (
	_ keyFilter = (*bloomKey)(nil)
	_ keyFilter = (*cuckooKey)(nil)
	_ keyFilter = (*expiringKey)(nil)
)

// object is one standalone key: the keyspace's entry for it (name, lock,
// log position, accounting) and its kind's filter.
type object struct {
	mu   sync.Mutex // serialises writes, the log record and snapshots of this key
	name string
	key  keyFilter
	kd   Kind // key.kind(), read on every lookup without an interface call

	// Under mu:
	lsn     uint64 // last log record applied
	bytes   int64  // bytes accounted in Store.used
	filters int    // sub-filters when bytes was measured
	dead    bool   // removed from the keyspace; retry the lookup
	dump    *dumpCache
}

func (o *object) kind() Kind { return o.kd }

// table is the table side of a table-backed expiring set, nil for any
// other key.
func (o *object) table() *expiringTable {
	if k, ok := o.key.(*expiringKey); ok {
		return k.table
	}
	return nil
}

// wrap makes the keyspace entry for key.
func wrap(name string, key keyFilter) *object {
	o := &object{name: name, key: key, kd: key.kind()}
	o.filters = key.subFilters()
	o.bytes = key.sizeBytes()
	return o
}

// newObject builds an empty key from spec; now is an expiring key's clock.
func newObject(name string, spec Spec, now func() time.Time) (*object, error) {
	key, err := spec.build(now)
	if err != nil {
		return nil, &Error{Code: CodeBadArgument, Msg: "could not create filter"}
	}
	return wrap(name, key), nil
}

// decodeKey decodes the filter of the opPut record r from rd.
func decodeKey(r *record, rd io.Reader, maxBytes int64, now func() time.Time) (*object, error) {
	kk := r.spec.Kind().stored()
	if kk == nil {
		return nil, errBadRecord
	}
	key, err := kk.decodeKey(rd, filter.DecodeConfig{MaxBytes: uint64(maxBytes)}, r.spec, now)
	if err != nil {
		return nil, err
	}
	if err := key.setCounters(r.card, r.deletes); err != nil {
		return nil, err
	}
	o := wrap(r.name, key)
	o.lsn = r.lsn
	return o, nil
}

// errSpecMismatch reports a decoded filter that does not match its record's
// parameters.
func errSpecMismatch(k Kind) error {
	return fmt.Errorf("%w: %s filter does not match its parameters", errBadRecord, k)
}

// getOrCreate returns the key name of kind kind, creating it from spec()
// unless noCreate. spec is called only to create: a Spec made for every
// write would cost each one an allocation.
func (s *Store) getOrCreate(name string, kind Kind, noCreate bool, spec func() Spec) (*object, error) {
	o, k := s.lookup(name)
	switch {
	case k == kind:
		return o, nil
	case k != KindNone:
		return nil, ErrWrongType
	case noCreate:
		return nil, ErrNotFound
	}
	// A copy: name may be a caller's conversion of its request's bytes,
	// which stays on the caller's stack only if getOrCreate keeps nothing
	// of it (a write to an existing key then allocates no name).
	return s.create(strings.Clone(name), spec(), false)
}

// create adds a new key built from spec. If the key exists, create returns
// ErrExists when exclusive is set, and otherwise the existing key (or
// ErrWrongType).
func (s *Store) create(name string, spec Spec, exclusive bool) (*object, error) {
	if err := spec.check(); err != nil {
		return nil, err
	}
	predicted := spec.predictedBytes()
	if err := s.reserve(predicted); err != nil {
		return nil, err
	}
	o, err := newObject(name, spec, s.cfg.Now)
	if err != nil {
		s.used.Add(-predicted)
		return nil, err
	}
	s.mu.Lock()
	if old := s.keys[name]; old != nil || s.loads[name] != nil {
		s.mu.Unlock()
		s.used.Add(-predicted)
		switch {
		case old == nil:
			return nil, ErrLoading
		case old.kind() != spec.Kind():
			return nil, ErrWrongType
		case exclusive:
			return nil, ErrExists
		}
		return old, nil
	}
	r := &record{op: opCreate, name: name, spec: spec}
	pos, err := s.logRecord(r)
	if err != nil {
		s.mu.Unlock()
		s.used.Add(-predicted)
		return nil, err
	}
	s.used.Add(o.bytes - predicted)
	o.lsn = r.lsn
	s.keys[name] = o
	s.mu.Unlock()
	return o, s.waitDurable(pos)
}
