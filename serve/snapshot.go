package serve

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"

	"github.com/bloomgate/bloomgate/internal/atomicfile"
	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// Snapshot format (snapshot.bgs in DataDir), little-endian:
//
//	"BGSNAP01" | u64 next LSN
//	per key:  u8 1 | u64 entry length | entry (an opPut record payload, see record.go)
//	end:      u8 0 | u32 CRC-32C of every byte before it
const (
	snapshotName  = "snapshot.bgs"
	snapshotMagic = "BGSNAP01"
)

// ErrCorruptSnapshot reports a snapshot that is truncated, malformed or fails
// its checksum. Open stops rather than serve emptier filters; restore the
// file from a backup or move it away to start without it (the log alone
// then holds only what was written since that snapshot).
var ErrCorruptSnapshot = errors.New("serve: snapshot is corrupt")

// Snapshot writes every standalone filter to the snapshot file atomically and
// then deletes the log segments it covers. Writes continue meanwhile: each
// key is locked only while it is copied. It is a no-op without DataDir.
func (s *Store) Snapshot() error {
	if s.aof == nil {
		return nil
	}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.closed.Load() {
		return ErrClosed
	}
	dirty := s.dirty.Load()
	seg, nextLSN, err := s.aof.rotate()
	if err != nil {
		return err
	}
	s.mu.RLock()
	objs := make([]*object, 0, len(s.keys))
	for _, o := range s.keys {
		objs = append(objs, o)
	}
	s.mu.RUnlock()
	path := filepath.Join(s.cfg.DataDir, snapshotName)
	if err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		return writeSnapshot(w, nextLSN, objs)
	}); err != nil {
		return fmt.Errorf("serve: snapshot: %w", err)
	}
	s.dirty.Add(-dirty)
	return s.aof.removeBefore(seg)
}

func writeSnapshot(w io.Writer, nextLSN uint64, objs []*object) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	crc := crc32c.New()
	out := io.MultiWriter(bw, crc)
	hdr := binary.LittleEndian.AppendUint64([]byte(snapshotMagic), nextLSN)
	if _, err := out.Write(hdr); err != nil {
		return err
	}
	var buf []byte
	for _, o := range objs {
		o.mu.Lock()
		if o.dead {
			o.mu.Unlock()
			continue
		}
		r, err := o.putRecord()
		o.mu.Unlock()
		if err != nil {
			return err
		}
		buf = r.appendPayload(buf[:0])
		entry := binary.LittleEndian.AppendUint64([]byte{1}, uint64(len(buf)))
		if _, err := out.Write(entry); err != nil {
			return err
		}
		if _, err := out.Write(buf); err != nil {
			return err
		}
	}
	if _, err := out.Write([]byte{0}); err != nil {
		return err
	}
	if _, err := bw.Write(binary.LittleEndian.AppendUint32(nil, crc.Sum32())); err != nil {
		return err
	}
	return bw.Flush()
}

// crcReader hashes what it reads.
type crcReader struct {
	r   io.Reader
	crc hash.Hash32
}

func (c *crcReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.crc.Write(p[:n])
	return n, err
}

// readSnapshot decodes a snapshot of size bytes. Every failure wraps
// ErrCorruptSnapshot.
func readSnapshot(r io.Reader, size, maxFilter int64) (uint64, []*object, error) {
	fail := func(format string, args ...any) (uint64, []*object, error) {
		return 0, nil, fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
	}
	cr := &crcReader{r: bufio.NewReaderSize(r, 1<<16), crc: crc32c.New()}
	var hdr [16]byte
	if _, err := io.ReadFull(cr, hdr[:]); err != nil || string(hdr[:8]) != snapshotMagic {
		return fail("bad header")
	}
	nextLSN := binary.LittleEndian.Uint64(hdr[8:])
	left := size - 16
	var objs []*object
	seen := map[string]bool{}
	for {
		var tag [1]byte
		if _, err := io.ReadFull(cr, tag[:]); err != nil {
			return fail("truncated")
		}
		left--
		if tag[0] == 0 {
			break
		}
		var lenb [8]byte
		if tag[0] != 1 || left < 8 {
			return fail("bad entry tag %d", tag[0])
		}
		if _, err := io.ReadFull(cr, lenb[:]); err != nil {
			return fail("truncated")
		}
		left -= 8
		n := binary.LittleEndian.Uint64(lenb[:])
		if n > uint64(left) || n > uint64(maxFilter)+1<<16 {
			return fail("entry of %d bytes past the end", n)
		}
		payload := make([]byte, n)
		if _, err := io.ReadFull(cr, payload); err != nil {
			return fail("truncated")
		}
		left -= int64(n)
		rec, err := decodePayload(payload)
		if err != nil || rec.op != opPut || seen[rec.name] {
			return fail("bad entry %d", len(objs))
		}
		o, err := objectFromPut(rec, maxFilter)
		if err != nil {
			return fail("key %q: %v", rec.name, err)
		}
		seen[rec.name] = true
		objs = append(objs, o)
	}
	want := cr.crc.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(cr.r, sum[:]); err != nil {
		return fail("truncated")
	}
	if binary.LittleEndian.Uint32(sum[:]) != want {
		return fail("checksum mismatch")
	}
	if left != 4 {
		return fail("%d bytes after the end", left-4)
	}
	return nextLSN, objs, nil
}

// recover loads the snapshot, replays the log and opens a new segment.
func (s *Store) recover() error {
	dir := s.cfg.DataDir
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return err
	}
	s.lock = lock
	nextLSN, err := s.loadSnapshot()
	if err != nil {
		return err
	}
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	for i, seg := range segs {
		last, err := s.replaySegment(seg, i == len(segs)-1)
		if err != nil {
			return err
		}
		nextLSN = max(nextLSN, last+1)
	}
	next := uint64(1)
	if len(segs) > 0 {
		next = segs[len(segs)-1] + 1
	}
	s.aof, err = openLog(dir, next, nextLSN)
	return err
}

func (s *Store) loadSnapshot() (uint64, error) {
	path := filepath.Join(s.cfg.DataDir, snapshotName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return 1, nil
	}
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil {
		return 0, err
	}
	nextLSN, objs, err := readSnapshot(f, size, s.cfg.MaxFilterBytes)
	if err != nil {
		return 0, fmt.Errorf("%s: %w; restore it from a backup, or move it away to start from the log alone (which holds only the writes since that snapshot)", path, err)
	}
	for _, o := range objs {
		s.keys[o.name] = o
		s.used.Add(o.bytes)
	}
	s.log.Info("snapshot loaded", "keys", len(objs), "path", path)
	return nextLSN, nil
}

// replaySegment applies a log segment and returns the last LSN in it. A
// torn record at the end of the last segment is truncated with a warning;
// anywhere else it stops the start.
func (s *Store) replaySegment(seg uint64, last bool) (uint64, error) {
	path := filepath.Join(s.cfg.DataDir, segmentName(seg))
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil {
		return 0, err
	}
	var lastLSN uint64
	good, err := readRecords(bufio.NewReaderSize(f, 1<<16), size, s.cfg.MaxFilterBytes+1<<20, func(r *record) error {
		lastLSN = r.lsn
		return s.apply(r)
	})
	if errors.Is(err, errTornRecord) && last {
		s.log.Warn("log ends with a torn or damaged record; truncating it (it was never acknowledged)",
			"path", path, "offset", good, "dropped_bytes", size-good, "err", err)
		if terr := f.Truncate(good); terr != nil {
			return 0, terr
		}
		return lastLSN, f.Sync()
	}
	if err != nil {
		return 0, fmt.Errorf("serve: replaying %s: %w", path, err)
	}
	return lastLSN, nil
}

// apply replays one record, skipping it when the key already reflects it.
func (s *Store) apply(r *record) error {
	o := s.keys[r.name]
	if o != nil && o.lsn >= r.lsn {
		return nil
	}
	switch r.op {
	case opCreate:
		if o != nil {
			return nil
		}
		o, err := newObject(r.name, r.meta)
		if err != nil {
			return fmt.Errorf("serve: replay create %q: %w", r.name, err)
		}
		o.lsn = r.lsn
		s.keys[r.name] = o
		s.used.Add(o.bytes)
	case opPut:
		n, err := objectFromPut(r, s.cfg.MaxFilterBytes)
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
	case opAdd, opRemove:
		if o == nil {
			return nil
		}
		o.replayHashes(r, s.log)
		o.lsn = r.lsn
		s.remeasure(o)
	}
	return nil
}

func (o *object) replayHashes(r *record, log interface{ Warn(string, ...any) }) {
	for _, h := range r.hashes {
		switch {
		case o.bf != nil:
			if !o.bf.MayContainHash(h) && o.bf.AddHash(h) == nil {
				o.card.Add(1)
			}
		case r.op == opAdd:
			if err := o.cf.AddHash(h); err != nil {
				log.Warn("replay: cuckoo insert failed", "key", o.name, "err", err)
				continue
			}
			o.card.Add(1)
		default:
			if o.cf.RemoveHash(h) == nil {
				o.deletes.Add(1)
			}
		}
	}
}
