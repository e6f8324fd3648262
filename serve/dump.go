package serve

// A dump is an opPut record payload (see record.go) with an empty name: the
// key's kind, parameters, filter and counters. Front ends cut it into
// chunks their own way (serve/resp: SCANDUMP's iterators).

type dumpCache struct{ data []byte }

// pendingLoad is a restore in progress: chunks arrive in order.
type pendingLoad struct {
	kind     Kind
	total    uint64
	buf      []byte
	reserved int64
}

// Dump returns the dump of the key name, which must be of kind kind: what
// BeginRestore and RestoreChunk take to recreate it. The dump is cached until
// the key is next written and must not be modified.
func (s *Store) Dump(name string, kind Kind) ([]byte, error) {
	if s.sets[name] != nil {
		return nil, ErrSetReadOnly
	}
	o, k := s.lookup(name)
	switch {
	case k == KindNone:
		return nil, ErrNotFound
	case k != kind:
		return nil, ErrWrongType
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dump == nil {
		r, err := o.putRecord()
		if err != nil {
			return nil, err
		}
		r.name, r.lsn = "", 0
		o.dump = &dumpCache{data: r.appendPayload(nil)}
	}
	return o.dump.data, nil
}

// BeginRestore starts restoring the missing key name, of kind kind, from a
// dump of size bytes, which it reserves against MaxMemory. A size of 0 or
// one larger than any filter the store takes is ErrBadData, as is a key
// that exists or is being restored already.
func (s *Store) BeginRestore(name string, kind Kind, size uint64) error {
	if s.sets[name] != nil {
		return ErrSetReadOnly
	}
	if err := s.checkWrite(); err != nil {
		return err
	}
	return s.startLoad(name, kind, size)
}

// RestoreChunk adds the next chunk of a restore BeginRestore started; offset
// is where chunk starts in the dump, and must follow the chunks before
// (ErrBadOffset). The key appears once the last chunk is in.
func (s *Store) RestoreChunk(name string, kind Kind, offset int64, chunk []byte) error {
	if s.sets[name] != nil {
		return ErrSetReadOnly
	}
	if err := s.checkWrite(); err != nil {
		return err
	}
	s.mu.Lock()
	pl := s.loads[name]
	if pl == nil || pl.kind != kind {
		s.mu.Unlock()
		if _, k := s.lookup(name); k != KindNone && k != kind {
			return ErrWrongType
		}
		return ErrNotFound
	}
	if offset != int64(len(pl.buf)) || uint64(len(pl.buf))+uint64(len(chunk)) > pl.total {
		s.mu.Unlock()
		return ErrBadOffset
	}
	pl.buf = append(pl.buf, chunk...)
	if uint64(len(pl.buf)) < pl.total {
		s.mu.Unlock()
		return nil
	}
	delete(s.loads, name)
	s.used.Add(-pl.reserved)
	s.mu.Unlock()
	return s.finishLoad(name, kind, pl.buf)
}

func (s *Store) startLoad(name string, kind Kind, total uint64) error {
	if _, k := s.lookup(name); k != KindNone && k != kind {
		return ErrWrongType
	}
	if total == 0 || total > uint64(s.cfg.MaxFilterBytes)+1<<16 {
		return ErrBadData
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.keys[name]; o != nil && o.kind() != kind {
		return ErrWrongType
	}
	if s.keys[name] != nil || s.loads[name] != nil {
		return ErrBadData
	}
	if err := s.reserve(int64(total)); err != nil {
		return err
	}
	s.loads[name] = &pendingLoad{kind: kind, total: total, reserved: int64(total)}
	return nil
}

func (s *Store) finishLoad(name string, kind Kind, payload []byte) error {
	r, err := decodePayload(payload)
	if err != nil || r.op != opPut || r.spec.Kind() != kind {
		return ErrBadData
	}
	r.name = name
	o, err := objectFromPut(r, s.cfg.MaxFilterBytes, s.cfg.Now)
	if err != nil {
		return ErrBadData
	}
	s.mu.Lock()
	if s.keys[name] != nil {
		s.mu.Unlock()
		return ErrBadData
	}
	pos, err := s.logRecord(r)
	if err != nil {
		s.mu.Unlock()
		return err
	}
	o.lsn = r.lsn
	s.keys[name] = o
	s.used.Add(o.bytes)
	s.mu.Unlock()
	return s.waitDurable(pos)
}
