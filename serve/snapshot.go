package serve

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bloomgate/bloomgate/internal/atomicfile"
	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// Snapshot format (snapshot-<seg>.bgs in DataDir, where seg is the first log
// segment the snapshot does not cover), little-endian:
//
//	"BGSNAP01" | u64 next LSN
//	per key:  u8 1 | u64 entry length | entry (an opPut record payload, see record.go)
//	end:      u8 0 | u32 CRC-32C of every byte before it
//
// Entry tags other than 1 are reserved for new kinds of entry; a reader that
// meets one it does not know reports the snapshot as corrupt.
//
// Two generations are kept: the newest snapshot and the one before it, with
// every log segment from the older one's on. If the newest is damaged, Open
// falls back to the older one and replays the log from there, and nothing is
// lost. While there is only one snapshot, the log is kept from its first
// segment, which is the fallback. A file named snapshot.bgs (written before
// generations existed) is read as the oldest generation.
const (
	legacySnapshotName = "snapshot.bgs"
	snapshotPrefix     = "snapshot-"
	snapshotSuffix     = ".bgs"
	snapshotMagic      = "BGSNAP01"
	// damagedSuffix is added to a snapshot that failed its checks once a
	// start has fallen back past it, so it is kept for inspection but never
	// read again.
	damagedSuffix = ".damaged"
)

func snapshotFile(seg uint64) string {
	return fmt.Sprintf("%s%016d%s", snapshotPrefix, seg, snapshotSuffix)
}

// ErrCorruptSnapshot reports a snapshot that is truncated, malformed or fails
// its checksum. Open then falls back to the previous snapshot and the log;
// when there is nothing to fall back on it stops rather than serve emptier
// filters (see the check subcommand and docs/operations.md).
var ErrCorruptSnapshot = errors.New("serve: snapshot is corrupt")

// Snapshot writes every standalone filter to a new snapshot file atomically,
// then deletes the snapshot generations and log segments no longer needed
// (see the format comment). Writes continue meanwhile: each key is locked
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
	path := filepath.Join(s.cfg.DataDir, snapshotFile(seg))
	if err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		return writeSnapshot(w, nextLSN, objs)
	}); err != nil {
		return fmt.Errorf("serve: snapshot: %w", err)
	}
	s.dirty.Add(-dirty)
	s.aof.recovered(seg)
	return s.prune()
}

// prune deletes the snapshots older than the two newest, and the log
// segments older than the second newest.
func (s *Store) prune() error {
	dir := s.cfg.DataDir
	gens, err := listNumbered(dir, snapshotPrefix, snapshotSuffix)
	if err != nil {
		return err
	}
	if len(gens) < 2 {
		return nil
	}
	keep := gens[len(gens)-2]
	for _, g := range gens[:len(gens)-2] {
		if err := os.Remove(filepath.Join(dir, snapshotFile(g))); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(dir, legacySnapshotName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return s.aof.removeBefore(keep)
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
		var err error
		buf, err = o.writeEntry(out, buf)
		if err != nil {
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

// writeEntry writes o's snapshot entry (nothing if o was deleted), streaming
// the filter from its tables instead of copying it: a snapshot costs no
// memory beyond its buffers. The filter is encoded twice, once to count its
// bytes for the entry's length; o.mu is held throughout, so both are the
// same. buf is scratch space, returned for reuse.
func (o *object) writeEntry(w io.Writer, buf []byte) ([]byte, error) {
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
	entry := binary.LittleEndian.AppendUint64([]byte{1}, uint64(len(prefix))+uint64(count))
	if _, err := w.Write(entry); err != nil {
		return prefix, err
	}
	if _, err := w.Write(prefix); err != nil {
		return prefix, err
	}
	check := countingWriter(0)
	if err := o.writeFilter(io.MultiWriter(w, &check)); err != nil {
		return prefix, err
	}
	if check != count {
		return prefix, fmt.Errorf("serve: snapshot of %q: filter encoded to %d bytes, then %d", o.name, count, check)
	}
	return prefix, nil
}

// countingWriter counts the bytes written to it.
type countingWriter int64

func (c *countingWriter) Write(p []byte) (int, error) {
	*c += countingWriter(len(p))
	return len(p), nil
}

// readSnapshot decodes a snapshot of size bytes. Every failure wraps
// ErrCorruptSnapshot.
func readSnapshot(r io.Reader, size, maxFilter int64, now func() time.Time) (uint64, []*object, error) {
	fail := func(format string, args ...any) (uint64, []*object, error) {
		return 0, nil, fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
	}
	cr := crc32c.NewReader(bufio.NewReaderSize(r, 1<<16))
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
		left -= int64(n)
		rec, rest, err := readPutPrefix(cr, n)
		if err != nil || seen[rec.name] {
			return fail("bad entry %d", len(objs))
		}
		// The filter is decoded straight from the file, not from a copy.
		lr := &entryReader{io.LimitedReader{R: cr, N: int64(rest)}}
		o, err := decodeKey(rec, lr, maxFilter, now)
		if err != nil {
			return fail("key %q: %v", rec.name, err)
		}
		if lr.N != 0 {
			return fail("key %q: %d bytes after its filter", rec.name, lr.N)
		}
		seen[rec.name] = true
		objs = append(objs, o)
	}
	want := cr.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(cr.R, sum[:]); err != nil {
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

// entryReader reads the rest of a snapshot entry. Its bytes are in the file
// (readSnapshot checked the entry's length against the file's size), so it
// reports them as available: the filter's decoder then allocates each table
// once at its size, instead of growing it from 8 MiB as it must for a length
// that no input vouches for, which left a copy's worth of garbage at every
// start and a table with more capacity than it holds.
type entryReader struct{ io.LimitedReader }

// Len is the bytes left in the entry (filter.DecodeScalable and its kin
// look for it).
func (r *entryReader) Len() int { return int(r.N) }

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
// filter and returns it decoded, with the filter's length.
func readPutPrefix(r io.Reader, n uint64) (*record, uint64, error) {
	if n < putPrefixHead+putPrefixTail {
		return nil, 0, errBadRecord
	}
	head := make([]byte, putPrefixHead, 256)
	if _, err := io.ReadFull(r, head); err != nil {
		return nil, 0, err
	}
	nameLen := uint64(binary.LittleEndian.Uint32(head[9:]))
	if nameLen > n-putPrefixHead-putPrefixTail {
		return nil, 0, errBadRecord
	}
	prefix := append(head, make([]byte, nameLen+1)...)
	if _, err := io.ReadFull(r, prefix[putPrefixHead:]); err != nil {
		return nil, 0, err
	}
	ml := metaLen(Kind(prefix[len(prefix)-1]))
	if ml < 0 || uint64(len(prefix)+ml+16) > n {
		return nil, 0, errBadRecord
	}
	start := len(prefix)
	prefix = append(prefix, make([]byte, ml+16)...)
	if _, err := io.ReadFull(r, prefix[start:]); err != nil {
		return nil, 0, err
	}
	rec, err := decodePayload(prefix)
	if err != nil || rec.op != opPut {
		return nil, 0, errBadRecord
	}
	return rec, n - uint64(len(prefix)), nil
}

// snapshotGen is one snapshot file: it covers the log before segment seg.
type snapshotGen struct {
	name string
	seg  uint64
}

// snapshotGens lists the snapshots in dir, newest first.
func snapshotGens(dir string) ([]snapshotGen, error) {
	nums, err := listNumbered(dir, snapshotPrefix, snapshotSuffix)
	if err != nil {
		return nil, err
	}
	var gens []snapshotGen
	for i := len(nums) - 1; i >= 0; i-- {
		gens = append(gens, snapshotGen{snapshotFile(nums[i]), nums[i]})
	}
	if _, err := os.Stat(filepath.Join(dir, legacySnapshotName)); err == nil {
		gens = append(gens, snapshotGen{legacySnapshotName, 0})
	}
	return gens, nil
}

// recover loads the newest good snapshot, replays the log from it and opens
// a new segment.
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
	segs, err := listSegments(dir)
	if err != nil {
		return err
	}
	from, nextLSN, err := s.loadSnapshot(segs)
	if err != nil {
		return err
	}
	s.snapLSN = nextLSN
	var replay []uint64
	for _, seg := range segs {
		if seg >= from {
			replay = append(replay, seg)
		}
	}
	for i, seg := range replay {
		last, err := s.replaySegment(seg, i == len(replay)-1, len(replay)-1-i)
		if err != nil {
			return err
		}
		nextLSN = max(nextLSN, last+1)
	}
	next := uint64(1)
	if len(segs) > 0 {
		next = segs[len(segs)-1] + 1
	}
	fs := s.cfg.fs
	if fs == nil {
		fs = osFS{}
	}
	s.aof, err = openLog(dir, fs, next, nextLSN)
	return err
}

// loadSnapshot loads the newest snapshot that reads back whole and returns
// the first segment to replay and the snapshot's next LSN. A damaged
// snapshot is skipped for the one before it (and renamed with
// damagedSuffix) only when the log reaches back to that one; with none left,
// the log alone is replayed only when it reaches back to its first segment.
func (s *Store) loadSnapshot(segs []uint64) (from, nextLSN uint64, err error) {
	dir := s.cfg.DataDir
	gens, err := snapshotGens(dir)
	if err != nil {
		return 0, 0, err
	}
	oldest := uint64(1)
	if len(segs) > 0 {
		oldest = segs[0]
	}
	var damaged []string
	var firstErr error
	for _, g := range gens {
		path := filepath.Join(dir, g.name)
		nextLSN, objs, err := readSnapshotFile(path, s.cfg.MaxFilterBytes, s.cfg.Now)
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", path, err)
			}
			s.log.Error("snapshot is damaged; trying the one before it", "path", path, "err", err)
			damaged = append(damaged, g.name)
			continue
		}
		if len(damaged) > 0 && g.seg < oldest {
			return 0, 0, s.noFallback(firstErr)
		}
		for _, o := range objs {
			s.keys[o.name] = o
			s.used.Add(o.bytes)
		}
		s.markDamaged(damaged)
		s.log.Info("snapshot loaded", "keys", len(objs), "path", path)
		if len(damaged) > 0 {
			s.log.Warn("started from an older snapshot and the log since it; nothing is lost", "path", path, "damaged", damaged)
		}
		return g.seg, nextLSN, nil
	}
	if len(damaged) > 0 {
		if oldest != 1 {
			return 0, 0, s.noFallback(firstErr)
		}
		s.markDamaged(damaged)
		s.log.Warn("every snapshot is damaged; replaying the whole log, which reaches back to the first write", "damaged", damaged)
	}
	return 0, 1, nil
}

func (s *Store) noFallback(err error) error {
	return fmt.Errorf("%w; the log does not reach back far enough to start without it: restore the data directory from a backup, "+
		"or run `bloomgate serve check -data DIR` to see what starting without it would lose and `bloomgate serve check -repair -data DIR` to do so (the snapshot is kept)", err)
}

// markDamaged renames damaged snapshots out of the way once a start has
// fallen back past them.
func (s *Store) markDamaged(names []string) {
	for _, name := range names {
		path := filepath.Join(s.cfg.DataDir, name)
		if err := os.Rename(path, path+damagedSuffix); err != nil {
			s.log.Error("cannot rename a damaged snapshot", "path", path, "err", err)
		}
	}
}

func readSnapshotFile(path string, maxFilter int64, now func() time.Time) (uint64, []*object, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, nil, err
	}
	defer f.Close()
	size, err := fileSize(f)
	if err != nil {
		return 0, nil, err
	}
	return readSnapshot(f, size, maxFilter, now)
}

// replaySegment applies a log segment and returns the last LSN in it. A
// torn record at the end of the last segment is truncated with a warning;
// any other damage stops the start with a *LogDamageError.
func (s *Store) replaySegment(seg uint64, last bool, after int) (uint64, error) {
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
	sc, err := readSegment(f, size, s.maxRecord(), s.apply)
	if err != nil {
		return 0, fmt.Errorf("serve: replaying %s: %w", path, err)
	}
	switch {
	case sc.end == endTorn && last:
		s.log.Warn("the log ends with an incomplete record, cut short while it was written; truncating it",
			"path", path, "offset", sc.good, "dropped_bytes", size-sc.good, "why", sc.reason)
		if err := f.Truncate(sc.good); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
	case sc.end != endClean:
		return 0, &LogDamageError{Path: path, Offset: sc.good, Size: size, Reason: sc.reason, LastGood: sc.lastLSN, NextFiles: after}
	}
	return sc.lastLSN, nil
}

// maxRecord bounds a log record's payload.
func (s *Store) maxRecord() int64 { return s.cfg.MaxFilterBytes + 1<<20 }

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
