package serve

// Spec is the parameters of a new key: BloomParams, CuckooParams or
// ExpiringParams. Its kind is the kind of key Reserve creates.
type Spec interface {
	Kind() Kind
	isSpec()
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

func (BloomParams) isSpec()    {}
func (CuckooParams) isSpec()   {}
func (ExpiringParams) isSpec() {}

// Reserve creates the empty key name of spec's kind, with spec's parameters
// (zero fields: the defaults). It fails with ErrExists when the key exists
// (ErrWrongType when a table-backed set of that name answers only as a Bloom
// filter and spec is a cuckoo filter's), with a bad-argument error for a
// parameter out of range, and with ErrOOM past Config.MaxMemory.
func (s *Store) Reserve(name string, spec Spec) error {
	switch p := spec.(type) {
	case BloomParams:
		return s.reserveBloom(name, p)
	case CuckooParams:
		return s.reserveCuckoo(name, p)
	case ExpiringParams:
		return s.reserveExpiring(name, p)
	}
	return ErrWrongType // unreachable: Spec is sealed
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

// Info describes the key name (ErrNotFound when it does not exist).
func (s *Store) Info(name string) (Info, error) {
	var info Info
	var err error
	switch info.Kind = s.Type(name); info.Kind {
	case KindBloom, KindSet:
		info.Bloom, err = s.bloomInfo(name)
	case KindCuckoo:
		info.Cuckoo, err = s.cuckooInfo(name)
	case KindExpiring:
		info.Expiring, err = s.expiringInfo(name)
	default:
		err = ErrNotFound
	}
	return info, err
}
