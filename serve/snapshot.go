package serve

import (
	"encoding/binary"
	"fmt"
	"io"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
)

// A snapshot (package durable writes and reads the file) holds one entry
// per standalone key: the key's opPut record (see record.go), its lsn the
// key's last record's, so replay skips the records it already holds.

// Snapshot writes every standalone filter to a new snapshot file atomically,
// then deletes the snapshot generations and log segments no longer needed
// (see durable.Log.Snapshot). Writes continue meanwhile: each key is locked
// only while it is copied. It is a no-op without DataDir.
func (s *Store) Snapshot() error {
	if s.aof == nil {
		return nil
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	return s.snapshotLocked()
}

func (s *Store) snapshotLocked() error {
	dirty := s.dirty.Load()
	err := s.aof.Snapshot(func(w *durable.SnapshotWriter) error {
		s.mu.RLock()
		objs := make([]*object, 0, len(s.keys))
		for _, o := range s.keys {
			objs = append(objs, o)
		}
		s.mu.RUnlock()
		var buf []byte
		for _, o := range objs {
			var err error
			if buf, err = o.writeEntry(w, buf); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("serve: snapshot: %w", err)
	}
	s.dirty.Add(-dirty)
	return nil
}

// writeEntry writes o's snapshot entry (nothing if o was deleted), streaming
// the filter from its tables instead of copying it: a snapshot costs no
// memory beyond its buffers. The filter is encoded twice, once to count its
// bytes for the entry's length; o.mu is held throughout, so both are the
// same (w fails the snapshot if they are not). buf is scratch space,
// returned for reuse.
func (o *object) writeEntry(sw *durable.SnapshotWriter, buf []byte) ([]byte, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.dead || o.table() != nil { // a table-backed set is rebuilt from its table
		return buf, nil
	}
	r := o.putHead()
	prefix := r.appendPayload(buf[:0])
	var count countingWriter
	if err := o.writeFilter(&count); err != nil {
		return prefix, err
	}
	w, err := sw.Entry(uint64(len(prefix)) + uint64(count))
	if err != nil {
		return prefix, err
	}
	if _, err := w.Write(prefix); err != nil {
		return prefix, err
	}
	if err := o.writeFilter(w); err != nil {
		return prefix, fmt.Errorf("serve: snapshot of %q: %w", o.name, err)
	}
	return prefix, nil
}

// countingWriter counts the bytes written to it.
type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// loadEntries decodes a snapshot's entries into keys; now is expiring keys'
// clock.
func loadEntries(r *durable.SnapshotReader, maxFilter int64, now func() time.Time) ([]*object, error) {
	var objs []*object
	seen := map[string]bool{}
	for {
		e, err := r.Next()
		if err == io.EOF {
			return objs, nil
		}
		if err != nil {
			return nil, err
		}
		rec, err := readPutPrefix(e, uint64(e.Len()))
		if err != nil || seen[rec.name] {
			return nil, fmt.Errorf("bad entry %d", len(objs))
		}
		// The filter is decoded straight from the file, not from a copy:
		// e reports its length, so each table is allocated once.
		o, err := decodeKey(rec, e, maxFilter, now)
		if err != nil {
			return nil, fmt.Errorf("key %q: %v", rec.name, err)
		}
		seen[rec.name] = true
		objs = append(objs, o)
	}
}

// The part of an opPut payload before the filter: lsn, op and name length
// (putPrefixHead); the name; the meta (a kind byte and metaLen(kind) bytes);
// the two counters.
const (
	putPrefixHead = 8 + 1 + 4
	putPrefixTail = 1 + 21 + 8 + 8 // with the shortest meta
)

// metaLen is the bytes of a meta after its kind byte (see appendMeta), or -1
// for an unknown kind.
func metaLen(k Kind) int {
	if kk := k.stored(); kk != nil {
		return kk.metaLen
	}
	return -1
}

// readPutPrefix reads the part of an opPut payload of n bytes before the
// filter and returns it decoded.
func readPutPrefix(r io.Reader, n uint64) (*record, error) {
	if n < putPrefixHead+putPrefixTail {
		return nil, errBadRecord
	}
	head := make([]byte, putPrefixHead, 256)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, err
	}
	nameLen := uint64(binary.LittleEndian.Uint32(head[9:]))
	if nameLen > n-putPrefixHead-putPrefixTail {
		return nil, errBadRecord
	}
	prefix := append(head, make([]byte, nameLen+1)...)
	if _, err := io.ReadFull(r, prefix[putPrefixHead:]); err != nil {
		return nil, err
	}
	ml := metaLen(Kind(prefix[len(prefix)-1]))
	if ml < 0 || uint64(len(prefix)+ml+16) > n {
		return nil, errBadRecord
	}
	start := len(prefix)
	prefix = append(prefix, make([]byte, ml+16)...)
	if _, err := io.ReadFull(r, prefix[start:]); err != nil {
		return nil, err
	}
	rec, err := decodePayload(prefix)
	if err != nil || rec.op != opPut {
		return nil, errBadRecord
	}
	return rec, nil
}

// apply replays one record, skipping it when the snapshot or the key already
// reflects it.
func (s *Store) apply(r *record) error {
	if r.lsn < s.snapLSN {
		return nil
	}
	o := s.keys[r.name]
	if o != nil && o.lsn >= r.lsn {
		return nil
	}
	switch r.op {
	case opCreate:
		if o != nil {
			return nil
		}
		o, err := newObject(r.name, r.spec, s.cfg.Now)
		if err != nil {
			return fmt.Errorf("serve: replay create %q: %w", r.name, err)
		}
		o.lsn = r.lsn
		s.keys[r.name] = o
		s.used.Add(o.bytes)
	case opPut:
		n, err := objectFromPut(r, s.cfg.MaxFilterBytes, s.cfg.Now)
		if err != nil {
			return fmt.Errorf("serve: replay restore %q: %w", r.name, err)
		}
		if o != nil {
			s.used.Add(-o.bytes)
		}
		s.keys[r.name] = n
		s.used.Add(n.bytes)
	case opDel:
		if o != nil {
			delete(s.keys, r.name)
			s.used.Add(-o.bytes)
		}
	case opXAdd:
		if o == nil {
			return nil
		}
		k, ok := o.key.(*expiringKey)
		if !ok {
			return nil
		}
		s.replayXAdd(o, k, r)
		o.lsn = r.lsn
		s.remeasure(o)
	case opAdd, opAddNX, opRemove:
		if o == nil {
			return nil
		}
		o.key.replayHashes(r.op, r.hashes)
		o.lsn = r.lsn
		s.remeasure(o)
	}
	return nil
}
