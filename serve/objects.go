package serve

import (
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// meta is what a key was created with.
type meta struct {
	kind   Kind
	bloom  BloomParams
	cuckoo CuckooParams
	expiry ExpiringParams
}

func (m meta) check() error {
	if m.kind == KindExpiring {
		return m.expiry.check()
	}
	if m.kind == KindBloom {
		return m.bloom.check()
	}
	return m.cuckoo.check()
}

func (m meta) predictedBytes() int64 {
	if m.kind == KindExpiring {
		return m.expiry.predictedBytes()
	}
	if m.kind == KindBloom {
		return m.bloom.predictedBytes()
	}
	return m.cuckoo.predictedBytes()
}

// newObject builds an empty filter for m; now is an expiring key's clock.
func newObject(name string, m meta, now func() time.Time) (*object, error) {
	o := &object{name: name, kind: m.kind, meta: m}
	var err error
	switch m.kind {
	case KindExpiring:
		o.wf, err = m.expiry.build(now)
	case KindBloom:
		o.bf, err = m.bloom.build()
	default:
		o.cf, err = m.cuckoo.build()
	}
	if err != nil {
		return nil, &Error{Code: CodeBadArgument, Msg: "could not create filter"}
	}
	o.filters = o.subFilters()
	o.bytes = o.sizeBytes()
	return o, nil
}

// objectFrom wraps a decoded filter.
func objectFrom(name string, m meta, bf *filter.Scalable, cf *filter.Cuckoo) *object {
	o := &object{name: name, kind: m.kind, meta: m, bf: bf, cf: cf}
	o.filters = o.subFilters()
	o.bytes = o.sizeBytes()
	return o
}

// getOrCreate returns the key name, creating it from m unless noCreate.
func (s *Store) getOrCreate(name string, m meta, noCreate bool) (*object, error) {
	o, kind := s.lookup(name)
	switch {
	case kind == m.kind:
		return o, nil
	case kind != KindNone:
		return nil, ErrWrongType
	case noCreate:
		return nil, ErrNotFound
	}
	return s.create(name, m, false)
}

// create adds a new key built from m. If the key exists, create returns
// ErrExists when exclusive is set, and otherwise the existing key (or
// ErrWrongType).
func (s *Store) create(name string, m meta, exclusive bool) (*object, error) {
	if err := m.check(); err != nil {
		return nil, err
	}
	predicted := m.predictedBytes()
	if err := s.reserve(predicted); err != nil {
		return nil, err
	}
	o, err := newObject(name, m, s.cfg.Now)
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
		case old.kind != m.kind:
			return nil, ErrWrongType
		case exclusive:
			return nil, ErrExists
		}
		return old, nil
	}
	r := &record{op: opCreate, name: name, meta: m}
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
