package serve

import (
	"encoding/binary"
)

// SCANDUMP/LOADCHUNK format (ours, not RedisBloom's): iterator 0 returns a
// 16-byte header, "BGDUMP01" then the u64 length of the data; the data is
// an opPut record payload (see record.go) with an empty name, sent in chunks
// of dumpChunk bytes. The iterator returned with a chunk is 1 + the offset of
// the chunk's end, so LOADCHUNK finds each chunk's offset as
// iterator − 1 − len(chunk), as RedisBloom's clients expect.
const (
	dumpMagic     = "BGDUMP01"
	dumpHeaderLen = 16
	dumpChunk     = 1 << 20
)

type dumpCache struct{ data []byte }

// pendingLoad is a restore in progress: chunks arrive in order.
type pendingLoad struct {
	kind     Kind
	total    uint64
	buf      []byte
	reserved int64
}

// ScanDump returns the chunk of the key name's dump at iterator iter and the
// iterator for the next call; next is 0 (and data nil) at the end. The dump
// is consistent only if the key is not written while it is dumped.
func (s *Store) ScanDump(name string, kind Kind, iter int64) (next int64, data []byte, err error) {
	if s.sets[name] != nil {
		return 0, nil, ErrSetReadOnly
	}
	o, k := s.lookup(name)
	switch {
	case k == KindNone:
		return 0, nil, ErrNotFound
	case k != kind:
		return 0, nil, ErrWrongType
	}
	o.mu.Lock()
	if o.dump == nil {
		r, err := o.putRecord()
		if err != nil {
			o.mu.Unlock()
			return 0, nil, err
		}
		r.name, r.lsn = "", 0
		o.dump = &dumpCache{data: r.appendPayload(nil)}
	}
	d := o.dump.data
	o.mu.Unlock()
	if iter == 0 {
		return 1, binary.LittleEndian.AppendUint64([]byte(dumpMagic), uint64(len(d))), nil
	}
	off := iter - 1
	if off < 0 || off >= int64(len(d)) {
		return 0, nil, nil
	}
	end := min(off+dumpChunk, int64(len(d)))
	return iter + (end - off), d[off:end], nil
}

// LoadChunk restores a key from ScanDump's output: iterator 1 with the
// header starts a restore of a missing key (ErrBadData if it exists), later
// chunks must arrive in order, and the key appears once the last one is in.
func (s *Store) LoadChunk(name string, kind Kind, iter int64, data []byte) error {
	if s.sets[name] != nil {
		return ErrSetReadOnly
	}
	if err := s.checkWrite(); err != nil {
		return err
	}
	if iter == 1 {
		return s.startLoad(name, kind, data)
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
	off := iter - 1 - int64(len(data))
	if off != int64(len(pl.buf)) || uint64(len(pl.buf))+uint64(len(data)) > pl.total {
		s.mu.Unlock()
		return ErrBadOffset
	}
	pl.buf = append(pl.buf, data...)
	if uint64(len(pl.buf)) < pl.total {
		s.mu.Unlock()
		return nil
	}
	delete(s.loads, name)
	s.used.Add(-pl.reserved)
	s.mu.Unlock()
	return s.finishLoad(name, kind, pl.buf)
}

func (s *Store) startLoad(name string, kind Kind, hdr []byte) error {
	if _, k := s.lookup(name); k != KindNone && k != kind {
		return ErrWrongType
	}
	if len(hdr) != dumpHeaderLen || string(hdr[:8]) != dumpMagic {
		return ErrBadData
	}
	total := binary.LittleEndian.Uint64(hdr[8:])
	if total == 0 || total > uint64(s.cfg.MaxFilterBytes)+1<<16 {
		return ErrBadData
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.keys[name]; o != nil && o.kind != kind {
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
	if err != nil || r.op != opPut || r.meta.kind != kind {
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
