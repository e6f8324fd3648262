package serve

import "time"

// Spec is the parameters of a new key: BloomParams, CuckooParams or
// ExpiringParams. Its kind is the kind of key Reserve creates.
type Spec interface {
	Kind() Kind

	// The kind's part of creating a key (the interface is sealed).
	check() error
	predictedBytes() int64
	build(now func() time.Time) (keyFilter, error)
	appendMeta(b []byte) []byte // see record.go
	reserve(s *Store, name string) error
}

var (
	_ Spec = BloomParams{}
	_ Spec = CuckooParams{}
	_ Spec = ExpiringParams{}
)

// Kind returns KindBloom.
func (BloomParams) Kind() Kind { return KindBloom }

// Kind returns KindCuckoo.
func (CuckooParams) Kind() Kind { return KindCuckoo }

// Kind returns KindExpiring.
func (ExpiringParams) Kind() Kind { return KindExpiring }

// Reserve creates the empty key name of spec's kind, with spec's parameters
// (zero fields: the defaults). It fails with ErrExists when the key exists
// (ErrWrongType when a table-backed set of that name answers only as a Bloom
// filter and spec is a cuckoo filter's), with a bad-argument error for a
// parameter out of range, and with ErrOOM past Config.MaxMemory.
func (s *Store) Reserve(name string, spec Spec) error {
	if spec == nil {
		return ErrWrongType
	}
	return spec.reserve(s, name)
}

// Info describes a key. Kind says which of the other fields is set: Bloom
// for KindBloom and KindSet (a table-backed set reports its gate's filter),
// Cuckoo for KindCuckoo, Expiring for KindExpiring.
type Info struct {
	Kind     Kind
	Bloom    BloomInfo
	Cuckoo   CuckooInfo
	Expiring ExpiringInfo
}

// Info describes the key name (ErrNotFound when it does not exist). An
// expiring key first drops the generations that ended.
func (s *Store) Info(name string) (Info, error) {
	if set := s.sets[name]; set != nil {
		return Info{Kind: KindSet, Bloom: set.bloomInfo()}, nil
	}
	o, _ := s.lookup(name)
	if o == nil {
		return Info{}, ErrNotFound
	}
	o.mu.Lock()
	if !o.dead {
		s.expireObject(o)
	}
	o.mu.Unlock()
	return o.key.info(), nil
}
