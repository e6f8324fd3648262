package bloomgate

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/atomicfile"
	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// Snapshot errors.
var (
	// ErrNoSnapshot reports a SnapshotStore with no usable snapshot.
	// It is changefeed.ErrNoSnapshot.
	ErrNoSnapshot = changefeed.ErrNoSnapshot
	// ErrSnapshotCorrupt reports a snapshot that is truncated, damaged or
	// fails its checksum.
	ErrSnapshotCorrupt = errors.New("bloomgate: corrupt snapshot")
	// ErrSnapshotMismatch reports a snapshot of another set (its identity
	// differs from FollowConfig.Identity) or with a filter the gate cannot
	// use.
	ErrSnapshotMismatch = errors.New("bloomgate: snapshot does not match the set")
)

// A snapshot is a filter and the change-feed position it reflects:
//
//	magic "BGSNAP" | version u16 (2) | position u64 | identity length u16 |
//	identity | CRC-32C (Castagnoli) of the header bytes before it, u32 |
//	the filter in package filter's format, whose frame ends with the
//	CRC-32C of its own bytes
//
// Integers are little-endian. Every byte is checksummed once, so a start
// from a snapshot reads the table straight into the filter with one
// checksum pass. Version 1, still read, had no header checksum and instead a
// trailing CRC-32C of all the bytes before it, the filter included.
const (
	snapshotMagic       = "BGSNAP"
	snapshotVersion     = 2
	maxSnapshotIdentity = 4096
)

// writeSnapshot writes f at pos in the snapshot format.
func writeSnapshot(w io.Writer, identity string, pos changefeed.Position, f Filter) error {
	enc, ok := f.(io.WriterTo)
	if !ok {
		return fmt.Errorf("bloomgate: snapshot: %T cannot be encoded (no WriteTo)", f)
	}
	if len(identity) > maxSnapshotIdentity {
		return fmt.Errorf("bloomgate: snapshot: identity longer than %d bytes", maxSnapshotIdentity)
	}
	hdr := append([]byte(snapshotMagic), 0, 0)
	binary.LittleEndian.PutUint16(hdr[len(snapshotMagic):], snapshotVersion)
	hdr = binary.LittleEndian.AppendUint64(hdr, uint64(pos))
	hdr = binary.LittleEndian.AppendUint16(hdr, uint16(len(identity)))
	hdr = append(hdr, identity...)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32c.Checksum(hdr))
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	_, err := enc.WriteTo(w)
	return err
}

// readSnapshot reads a snapshot written by writeSnapshot. A snapshot of
// another identity returns ErrSnapshotMismatch; damaged input
// ErrSnapshotCorrupt (or the filter decoder's error). maxBytes bounds the
// filter's memory (0: package filter's default).
func readSnapshot(r io.Reader, identity string, maxBytes uint64) (Filter, changefeed.Position, error) {
	tr := crc32c.NewReader(r)
	var hdr [len(snapshotMagic) + 2 + 8 + 2]byte
	if _, err := io.ReadFull(tr, hdr[:]); err != nil {
		return nil, 0, fmt.Errorf("%w: header: %v", ErrSnapshotCorrupt, err)
	}
	if string(hdr[:len(snapshotMagic)]) != snapshotMagic {
		return nil, 0, fmt.Errorf("%w: not a snapshot (bad magic)", ErrSnapshotCorrupt)
	}
	p := hdr[len(snapshotMagic):]
	version := binary.LittleEndian.Uint16(p)
	if version != 1 && version != snapshotVersion {
		return nil, 0, fmt.Errorf("%w: version %d, this build reads 1 and %d", ErrSnapshotMismatch, version, snapshotVersion)
	}
	pos := changefeed.Position(binary.LittleEndian.Uint64(p[2:]))
	n := binary.LittleEndian.Uint16(p[10:])
	if n > maxSnapshotIdentity {
		return nil, 0, fmt.Errorf("%w: identity of %d bytes", ErrSnapshotCorrupt, n)
	}
	id := make([]byte, n)
	if _, err := io.ReadFull(tr, id); err != nil {
		return nil, 0, fmt.Errorf("%w: identity: %v", ErrSnapshotCorrupt, err)
	}
	if version == snapshotVersion {
		var sum [4]byte
		if _, err := io.ReadFull(r, sum[:]); err != nil {
			return nil, 0, fmt.Errorf("%w: header checksum: %v", ErrSnapshotCorrupt, err)
		}
		if binary.LittleEndian.Uint32(sum[:]) != tr.Sum32() {
			return nil, 0, fmt.Errorf("%w: header checksum mismatch", ErrSnapshotCorrupt)
		}
	}
	if string(id) != identity {
		return nil, 0, fmt.Errorf("%w: snapshot of %q, want %q", ErrSnapshotMismatch, id, identity)
	}
	if version == snapshotVersion {
		// The filter's frame checksums itself: read it straight from r.
		decoded, err := filter.Decode(r, filter.DecodeConfig{MaxBytes: maxBytes})
		if err != nil {
			return nil, 0, fmt.Errorf("%w: filter: %w", ErrSnapshotCorrupt, err)
		}
		return asGateFilter(decoded, pos)
	}
	decoded, err := filter.Decode(tr, filter.DecodeConfig{MaxBytes: maxBytes})
	if err != nil {
		return nil, 0, fmt.Errorf("%w: filter: %w", ErrSnapshotCorrupt, err)
	}
	sum := tr.Sum32()
	var trailer [4]byte
	if _, err := io.ReadFull(r, trailer[:]); err != nil {
		return nil, 0, fmt.Errorf("%w: checksum: %v", ErrSnapshotCorrupt, err)
	}
	if binary.LittleEndian.Uint32(trailer[:]) != sum {
		return nil, 0, fmt.Errorf("%w: checksum mismatch", ErrSnapshotCorrupt)
	}
	return asGateFilter(decoded, pos)
}

func asGateFilter(decoded filter.Filter, pos changefeed.Position) (Filter, changefeed.Position, error) {
	f, ok := decoded.(Filter)
	if !ok {
		return nil, 0, fmt.Errorf("%w: a %T cannot be a gate's filter", ErrSnapshotMismatch, decoded)
	}
	return f, pos, nil
}

// lenReader counts down the bytes left in a file of known size.
type lenReader struct {
	r    io.Reader
	left int64
}

func (l *lenReader) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	l.left -= int64(n)
	return n, err
}

func (l *lenReader) Len() int { return int(max(l.left, 0)) }

// SnapshotStore keeps a gate's snapshots: a filter and the change-feed
// position it reflects (changefeed.SnapshotStore).
type SnapshotStore = changefeed.SnapshotStore

// DirSnapshots returns a SnapshotStore keeping snapshots as files in dir
// (created if missing), each written atomically (temporary file, fsync,
// rename, fsync of the directory). It keeps the newest Keep files (default
// 2), so a damaged newest one leaves an older one to start from.
func DirSnapshots(dir string) *DirStore { return &DirStore{Dir: dir} }

// DirStore is the SnapshotStore of DirSnapshots.
type DirStore struct {
	Dir  string
	Keep int // snapshots kept; default 2
}

const snapshotSuffix = ".bgsnap"

// Save implements SnapshotStore.
func (d *DirStore) Save(ctx context.Context, pos changefeed.Position, write func(io.Writer) error) error {
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return fmt.Errorf("bloomgate: snapshot dir: %w", err)
	}
	name := filepath.Join(d.Dir, fmt.Sprintf("%016x%s", uint64(pos), snapshotSuffix))
	if err := atomicfile.Write(name, 0o644, write); err != nil {
		return fmt.Errorf("bloomgate: snapshot: %w", err)
	}
	names, err := d.list()
	if err != nil {
		return err
	}
	keep := d.Keep
	if keep <= 0 {
		keep = 2
	}
	for _, old := range names[min(keep, len(names)):] {
		os.Remove(filepath.Join(d.Dir, old))
	}
	return nil
}

// list returns the snapshot files, newest (highest position) first.
func (d *DirStore) list() ([]string, error) {
	entries, err := os.ReadDir(d.Dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("bloomgate: snapshot dir: %w", err)
	}
	var names []string
	for _, e := range entries {
		if n := e.Name(); e.Type().IsRegular() && strings.HasSuffix(n, snapshotSuffix) && len(n) == 16+len(snapshotSuffix) {
			names = append(names, n)
		}
	}
	slices.Sort(names)
	slices.Reverse(names)
	return names, nil
}

// Load implements SnapshotStore.
func (d *DirStore) Load(ctx context.Context, try func(r io.Reader) error) error {
	names, err := d.list()
	if err != nil {
		return err
	}
	errs := []error{ErrNoSnapshot}
	for _, n := range names {
		if err := ctx.Err(); err != nil {
			return err
		}
		f, err := os.Open(filepath.Join(d.Dir, n))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var size int64
		if fi, serr := f.Stat(); serr == nil {
			size = fi.Size()
		}
		// No buffer: the table is read straight into the filter's memory;
		// the few small header reads cost a system call each.
		err = try(&lenReader{r: f, left: size})
		f.Close()
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", n, err))
	}
	return errors.Join(errs...)
}
