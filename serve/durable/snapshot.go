package durable

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

// SnapshotWriter writes a snapshot's entries (see Log.Snapshot).
type SnapshotWriter struct {
	bw   *bufio.Writer
	crc  hash.Hash32
	out  io.Writer // bw and crc
	left uint64    // bytes of the current entry not yet written
	n    int       // entries begun
}

// Entry begins an entry of size bytes and returns the writer that takes
// them. The entry must be written whole before the next one begins: a
// shortfall or an excess fails the snapshot.
func (w *SnapshotWriter) Entry(size uint64) (io.Writer, error) {
	if err := w.entryDone(); err != nil {
		return nil, err
	}
	if _, err := w.out.Write(binary.LittleEndian.AppendUint64([]byte{1}, size)); err != nil {
		return nil, err
	}
	w.left = size
	w.n++
	return entryWriter{w}, nil
}

func (w *SnapshotWriter) entryDone() error {
	if w.left != 0 {
		return fmt.Errorf("durable: snapshot entry %d: %d bytes short of its length", w.n-1, w.left)
	}
	return nil
}

// entryWriter takes the bytes of the current entry.
type entryWriter struct{ w *SnapshotWriter }

func (e entryWriter) Write(p []byte) (int, error) {
	if uint64(len(p)) > e.w.left {
		return 0, fmt.Errorf("durable: snapshot entry %d: %d bytes past its length", e.w.n-1, uint64(len(p))-e.w.left)
	}
	n, err := e.w.out.Write(p)
	e.w.left -= uint64(n)
	return n, err
}

// finish writes the end of the snapshot.
func (w *SnapshotWriter) finish() error {
	if err := w.entryDone(); err != nil {
		return err
	}
	if _, err := w.out.Write([]byte{0}); err != nil {
		return err
	}
	if _, err := w.bw.Write(binary.LittleEndian.AppendUint32(nil, w.crc.Sum32())); err != nil {
		return err
	}
	return w.bw.Flush()
}

// writeSnapshot writes a snapshot of next LSN nextLSN to out, its entries
// through write.
func writeSnapshot(out io.Writer, nextLSN uint64, write func(*SnapshotWriter) error) error {
	w := &SnapshotWriter{bw: bufio.NewWriterSize(out, 1<<16), crc: crc32c.New()}
	w.out = io.MultiWriter(w.bw, w.crc)
	if _, err := w.out.Write(binary.LittleEndian.AppendUint64([]byte(snapshotMagic), nextLSN)); err != nil {
		return err
	}
	if err := write(w); err != nil {
		return err
	}
	return w.finish()
}

// Snapshot starts a new log segment, then writes a snapshot of everything
// before it atomically, its entries through write (writes continue
// meanwhile: a record appended after the new segment began is replayed
// over the snapshot, and the caller skips what an entry already holds by
// its LSN). Once the snapshot is durable it ends a failed fsync's refusal
// (see Commit) and deletes the snapshot generations and log segments no
// longer needed (see the package doc).
func (l *Log) Snapshot(write func(w *SnapshotWriter) error) error {
	seg, nextLSN, err := l.rotate()
	if err != nil {
		return fmt.Errorf("writing the log: %w", err)
	}
	path := filepath.Join(l.dir, snapshotFile(seg))
	if err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
		return writeSnapshot(w, nextLSN, write)
	}); err != nil {
		return err
	}
	l.recovered(seg)
	return l.prune()
}

// prune deletes the snapshots older than the two newest, and the log
// segments older than the second newest.
func (l *Log) prune() error {
	gens, err := listNumbered(l.dir, snapshotPrefix, snapshotSuffix)
	if err != nil {
		return err
	}
	if len(gens) < 2 {
		return nil
	}
	keep := gens[len(gens)-2]
	for _, g := range gens[:len(gens)-2] {
		if err := os.Remove(filepath.Join(l.dir, snapshotFile(g))); err != nil {
			return err
		}
	}
	if err := os.Remove(filepath.Join(l.dir, legacySnapshotName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return l.removeBefore(keep)
}

// SnapshotReader reads a snapshot's entries back in order. Every error it
// returns wraps ErrCorruptSnapshot.
type SnapshotReader struct {
	cr       *crc32c.Reader
	left     int64 // bytes of the file after what was read
	maxEntry int64
	nextLSN  uint64
	entry    *Entry
	n        int
	done     bool
}

// Entry is one snapshot entry being read: its bytes are in the file (the
// reader checked its length against the file's size), so it reports them
// as available with Len, and a decoder can allocate at once what they hold
// instead of growing a buffer from a length no input vouches for.
type Entry struct{ io.LimitedReader }

// Len is the bytes of the entry not yet read.
func (e *Entry) Len() int { return int(e.N) }

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrCorruptSnapshot, fmt.Sprintf(format, args...))
}

// NewSnapshotReader reads a snapshot of size bytes from r; an entry longer
// than maxEntry is corruption.
func NewSnapshotReader(r io.Reader, size, maxEntry int64) (*SnapshotReader, error) {
	cr := crc32c.NewReader(bufio.NewReaderSize(r, 1<<16))
	var hdr [16]byte
	if _, err := io.ReadFull(cr, hdr[:]); err != nil || string(hdr[:8]) != snapshotMagic {
		return nil, corrupt("bad header")
	}
	return &SnapshotReader{cr: cr, left: size - 16, maxEntry: maxEntry, nextLSN: binary.LittleEndian.Uint64(hdr[8:])}, nil
}

// NextLSN is the LSN of the first record the snapshot does not hold.
func (r *SnapshotReader) NextLSN() uint64 { return r.nextLSN }

// Next returns the next entry, to be read whole before Next is called
// again, or io.EOF after the last one, once the snapshot's checksum and
// length are verified.
func (r *SnapshotReader) Next() (*Entry, error) {
	if r.done {
		return nil, io.EOF
	}
	if r.entry != nil && r.entry.N != 0 {
		return nil, corrupt("entry %d: %d bytes after what was read of it", r.n-1, r.entry.N)
	}
	var tag [1]byte
	if _, err := io.ReadFull(r.cr, tag[:]); err != nil {
		return nil, corrupt("truncated")
	}
	r.left--
	if tag[0] == 0 {
		return nil, r.end()
	}
	var lenb [8]byte
	if tag[0] != 1 || r.left < 8 {
		return nil, corrupt("bad entry tag %d", tag[0])
	}
	if _, err := io.ReadFull(r.cr, lenb[:]); err != nil {
		return nil, corrupt("truncated")
	}
	r.left -= 8
	n := binary.LittleEndian.Uint64(lenb[:])
	if n > uint64(r.left) || n > uint64(r.maxEntry) {
		return nil, corrupt("entry of %d bytes past the end", n)
	}
	r.left -= int64(n)
	r.entry = &Entry{io.LimitedReader{R: r.cr, N: int64(n)}}
	r.n++
	return r.entry, nil
}

// end checks the snapshot's checksum and that nothing follows it.
func (r *SnapshotReader) end() error {
	want := r.cr.Sum32()
	var sum [4]byte
	if _, err := io.ReadFull(r.cr.R, sum[:]); err != nil {
		return corrupt("truncated")
	}
	if binary.LittleEndian.Uint32(sum[:]) != want {
		return corrupt("checksum mismatch")
	}
	if r.left != 4 {
		return corrupt("%d bytes after the end", r.left-4)
	}
	r.done = true
	return io.EOF
}

// Entries is the number of entries Next returned.
func (r *SnapshotReader) Entries() int { return r.n }

// SnapshotFunc reads a snapshot's entries through r to their end (Next
// returning io.EOF). Any error fails the snapshot: it counts as damaged.
type SnapshotFunc func(r *SnapshotReader) error

// readSnapshotFile reads the snapshot at path through fn and returns the
// number of entries. Every failure but opening the file wraps
// ErrCorruptSnapshot.
func readSnapshotFile(path string, maxEntry int64, fn SnapshotFunc) (int, error) {
	f, size, err := openSized(path, os.O_RDONLY)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	r, err := NewSnapshotReader(f, size, maxEntry)
	if err != nil {
		return 0, err
	}
	if err := fn(r); err != nil {
		if !errors.Is(err, ErrCorruptSnapshot) {
			err = fmt.Errorf("%w: %w", ErrCorruptSnapshot, err)
		}
		return r.n, err
	}
	if !r.done {
		return r.n, corrupt("not read to its end")
	}
	return r.n, nil
}
