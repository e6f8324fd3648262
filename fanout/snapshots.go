package fanout

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// record is a snapshot record: the snapshot at Position, the log's cursor
// to read after it, the object holding it, its size and SHA-256, and the
// term of the feeder that took it, and the generation of its filter (one
// more with every filter the feeder builds: a bootstrap, a rebuild).
// Encoded by appendRecord:
//
//	version | flags | term u64 | position u64 | size u64 | gen u64 | sha256 [32] |
//	cursor length uvarint | cursor | object length uvarint | object |
//	[MAC] | CRC
type record struct {
	Term     uint64
	Position changefeed.Position
	Size     uint64
	Gen      uint64
	Digest   [sha256.Size]byte
	Cursor   Cursor
	Object   string
}

func appendRecord(dst []byte, r record, key []byte) []byte {
	start := len(dst)
	dst = header(dst, key)
	dst = binary.LittleEndian.AppendUint64(dst, r.Term)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(r.Position))
	dst = binary.LittleEndian.AppendUint64(dst, r.Size)
	dst = binary.LittleEndian.AppendUint64(dst, r.Gen)
	dst = append(dst, r.Digest[:]...)
	dst = binary.AppendUvarint(dst, uint64(len(r.Cursor)))
	dst = append(dst, r.Cursor...)
	dst = binary.AppendUvarint(dst, uint64(len(r.Object)))
	dst = append(dst, r.Object...)
	return seal(dst, start, domainRecord, key)
}

func decodeRecord(p []byte, key []byte) (record, error) {
	body, err := open(p, domainRecord, key)
	if err != nil {
		return record{}, err
	}
	if len(body) < 2+32+sha256.Size {
		return record{}, fmt.Errorf("%w: snapshot record of %d bytes", ErrCorrupt, len(body))
	}
	r := record{
		Term:     binary.LittleEndian.Uint64(body[2:]),
		Position: changefeed.Position(binary.LittleEndian.Uint64(body[10:])),
		Size:     binary.LittleEndian.Uint64(body[18:]),
		Gen:      binary.LittleEndian.Uint64(body[26:]),
	}
	copy(r.Digest[:], body[34:])
	d := decoder{p: body[34+sha256.Size:]}
	str := func() string {
		n := d.count(1)
		if d.err != nil || n > uint64(len(d.p)) {
			d.fail("truncated string")
			return ""
		}
		s := string(d.p[:n])
		d.p = d.p[n:]
		return s
	}
	r.Cursor = Cursor(str())
	r.Object = str()
	if d.err == nil && len(d.p) != 0 {
		d.fail("trailing bytes")
	}
	if d.err == nil && r.Object == "" {
		d.fail("no object")
	}
	return r, d.err
}

// newer reports whether r should replace cur: a later term, or the same
// term and a later position.
func (r record) newer(cur record) bool {
	return r.Term > cur.Term || r.Term == cur.Term && r.Position > cur.Position
}

// errReadOnly is what an instance's store without Local returns from
// Save; it never reaches Follow (Save returns nil then).
var errOlder = errors.New("fanout: local snapshot older than the feeder's")

// snapshots is the bloomgate.SnapshotStore of a feeder (pub set: Save
// uploads and records) or an instance (Save writes to local, if any).
type snapshots struct {
	b     *Backend
	pub   *publisher               // the feeder's; nil on an instance
	local changefeed.SnapshotStore // an instance's own, or nil
	// loaded is told the record (or local cursor) a Load used.
	loaded func(pos changefeed.Position, cur Cursor, term, gen uint64, local bool)
	// cursorOf returns the cursor after pos, its term and the filter's
	// generation (an instance's local Save).
	cursorOf func(pos changefeed.Position) (Cursor, uint64, uint64, bool)
}

var _ changefeed.SnapshotStore = (*snapshots)(nil)

// ReadDelay is how long after the feeder's Save a running instance may take
// to read the new record (it reads it every filterCheckEvery): the feeder's
// growth trigger leaves room for the keys that arrive meanwhile. Zero on an
// instance (nobody reads its snapshots).
func (ss *snapshots) ReadDelay() time.Duration {
	if ss.pub == nil {
		return 0
	}
	return filterCheckEvery
}

// Save uploads the snapshot (the feeder's) or writes it to the local
// store (an instance's; without one it does nothing).
func (ss *snapshots) Save(ctx context.Context, pos changefeed.Position, write func(io.Writer) error) error {
	if ss.pub == nil {
		if ss.local == nil {
			return nil
		}
		cur, term, gen, ok := ss.cursorOf(pos)
		if !ok {
			return fmt.Errorf("fanout: local snapshot at %v: no log cursor known for it", pos)
		}
		return ss.local.Save(ctx, pos, func(w io.Writer) error {
			if _, err := w.Write(localHeader(cur, term, gen)); err != nil {
				return err
			}
			return write(w)
		})
	}
	cur, ok := ss.pub.cursorOf(pos)
	if !ok {
		return fmt.Errorf("fanout: snapshot at %v: no log cursor known for it", pos)
	}
	rec := record{Term: ss.pub.term, Position: pos, Cursor: cur, Gen: ss.pub.gen(), Object: fmt.Sprintf("%016x-%016x", uint64(pos), ss.pub.term)}
	pr, pw := io.Pipe()
	h := sha256.New()
	cw := &countWriter{w: io.MultiWriter(pw, h)}
	go func() {
		bw := bufio.NewWriterSize(cw, 1<<17)
		err := write(bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	err := ss.b.Store.PutObject(ctx, rec.Object, pr)
	pr.CloseWithError(err) // unblocks the writer if the upload gave up early
	if err != nil {
		return fmt.Errorf("fanout: snapshot upload: %w", err)
	}
	rec.Size = uint64(cw.n)
	h.Sum(rec.Digest[:0])
	if err := ss.advance(ctx, rec); err != nil {
		return err
	}
	ss.prune(ctx)
	return nil
}

// advance makes rec the current record unless a newer one is (by
// revision), keeping the one it replaces as the previous record.
func (ss *snapshots) advance(ctx context.Context, rec record) error {
	val := appendRecord(nil, rec, ss.b.Key)
	for {
		old, rev, err := ss.b.Store.Get(ctx, keySnapshot)
		switch {
		case errors.Is(err, ErrNotFound):
			rev = 0
		case err != nil:
			return fmt.Errorf("fanout: snapshot record: %w", err)
		default:
			if cur, err := decodeRecord(old, ss.b.Key); err == nil {
				if !rec.newer(cur) {
					return nil // a newer snapshot is recorded already
				}
				if err := ss.b.Store.Put(ctx, keySnapPrev, old); err != nil {
					return fmt.Errorf("fanout: snapshot record: %w", err)
				}
			}
		}
		_, err = ss.b.Store.CompareAndPut(ctx, keySnapshot, val, rev)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConflict) {
			return fmt.Errorf("fanout: snapshot record: %w", err)
		}
	}
}

// records returns the valid snapshot records, newest first.
//
// A record that does not decode or verify is skipped and logged; refused
// says why, for the error of a Load that finds nothing usable.
func (ss *snapshots) records(ctx context.Context) (recs []record, refused []error, err error) {
	for _, k := range []string{keySnapshot, keySnapPrev} {
		v, _, err := ss.b.Store.Get(ctx, k)
		if errors.Is(err, ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("fanout: snapshot records: %w", err)
		}
		r, err := decodeRecord(v, ss.b.Key)
		if err != nil {
			ss.b.Logger.Warn("bloomgate: fan-out snapshot record refused", "set", ss.b.Name, "key", k, "err", err)
			refused = append(refused, fmt.Errorf("snapshot record %s refused: %w", k, err))
			continue
		}
		recs = append(recs, r)
	}
	if len(recs) == 2 && !recs[0].newer(recs[1]) {
		recs[0], recs[1] = recs[1], recs[0]
	}
	return recs, refused, nil
}

// prune deletes the objects no record names, but for uploads that may be
// in progress (named after a position beyond the newest record's). Failures
// only leave objects behind.
func (ss *snapshots) prune(ctx context.Context) {
	recs, _, err := ss.records(ctx)
	if err != nil || len(recs) == 0 {
		return
	}
	keep := map[string]bool{}
	for _, r := range recs {
		keep[r.Object] = true
	}
	names, err := ss.b.Store.Objects(ctx)
	if err != nil {
		return
	}
	newest := fmt.Sprintf("%016x", uint64(recs[0].Position))
	for _, n := range names {
		if !keep[n] && n[:min(16, len(n))] <= newest {
			ss.b.Store.DeleteObject(ctx, n)
		}
	}
}

// Load tries the instance's newest local snapshot when it is at least as
// new as the feeder's newest, then the recorded (feeder's) snapshots,
// newest first, then any local one.
func (ss *snapshots) Load(ctx context.Context, try func(r io.Reader) error) error {
	recs, refused, err := ss.records(ctx)
	if err != nil && ss.local == nil {
		return err
	}
	errs := append([]error{changefeed.ErrNoSnapshot}, refused...)
	if err != nil {
		errs = append(errs, err)
	}
	var newest changefeed.Position
	var gen uint64
	if len(recs) > 0 {
		newest, gen = recs[0].Position, recs[0].Gen
	}
	if ss.local != nil {
		if lerr := ss.loadLocal(ctx, newest, gen, try); lerr == nil {
			return nil
		} else if ctx.Err() != nil {
			return ctx.Err()
		} else {
			errs = append(errs, lerr)
		}
	}
	for _, r := range recs {
		err := ss.loadRecord(ctx, r, try)
		if err == nil {
			ss.loaded(r.Position, r.Cursor, r.Term, r.Gen, false)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.Object, err))
	}
	if ss.local != nil && len(recs) > 0 {
		// The feeder's failed: an older local one beats none.
		if err := ss.loadLocal(ctx, 0, 0, try); err == nil {
			return nil
		}
	}
	return joinErrs(errs)
}

// joinErrs joins errors on one line (a state's reason, a log field), each
// still matched by errors.Is.
func joinErrs(errs []error) error {
	err := errs[0]
	for _, e := range errs[1:] {
		err = fmt.Errorf("%w; %w", err, e)
	}
	return err
}

func (ss *snapshots) loadRecord(ctx context.Context, r record, try func(io.Reader) error) error {
	rc, size, err := ss.b.Store.GetObject(ctx, r.Object)
	if err != nil {
		return err
	}
	defer rc.Close()
	if size == 0 {
		size = int64(r.Size)
	}
	// The object is checked against its record's size and SHA-256 (an
	// authenticated record's on a signed set): hashed here, unless the
	// store checks the same SHA-256 at the object's end.
	h := sha256.New()
	if c, ok := rc.(CheckedObject); ok {
		if sum, ok := c.SHA256(); ok && sum == r.Digest {
			h = nil
		}
	}
	cw := &countWriter{w: io.Discard}
	if h != nil {
		cw.w = h
	}
	// A small buffer for the headers: the table's reads, larger, bypass
	// it and are copied once, from the store's chunk into the table.
	sr := &sizedReader{r: bufio.NewReaderSize(io.TeeReader(rc, cw), 16<<10), left: size}
	if err := try(sr); err != nil {
		return err
	}
	// The decoder stops at its filter's last byte: what follows, and the
	// checks a store makes at the end of an object (JetStream's size and
	// SHA-256), would otherwise go unread, and a damaged snapshot whose
	// own checksums hold be accepted.
	if _, err := io.Copy(io.Discard, sr); err != nil {
		return err
	}
	if uint64(cw.n) != r.Size || h != nil && [sha256.Size]byte(h.Sum(nil)) != r.Digest {
		why := ErrCorrupt
		if len(ss.b.Key) > 0 {
			why = ErrUnauthenticated
		}
		return fmt.Errorf("%w: snapshot %s: %d bytes not matching its record's size (%d) and SHA-256", why, r.Object, cw.n, r.Size)
	}
	return nil
}

// localMagic starts an instance's local snapshot: the log cursor and term
// it continues from, then bloomgate's snapshot.
const localMagic = "BGFANOUT2"

func localHeader(cur Cursor, term, gen uint64) []byte {
	b := append([]byte(localMagic), byte(len(cur)))
	b = append(b, cur...)
	b = binary.LittleEndian.AppendUint64(b, term)
	return binary.LittleEndian.AppendUint64(b, gen)
}

func (ss *snapshots) loadLocal(ctx context.Context, atLeast changefeed.Position, minGen uint64, try func(io.Reader) error) error {
	return ss.local.Load(ctx, func(r io.Reader) error {
		br := bufio.NewReaderSize(r, 1<<16)
		hdr := make([]byte, len(localMagic)+1)
		if _, err := io.ReadFull(br, hdr); err != nil || !strings.HasPrefix(string(hdr), localMagic) {
			return fmt.Errorf("%w: not a fan-out instance's local snapshot", ErrCorrupt)
		}
		rest := make([]byte, int(hdr[len(localMagic)])+16)
		if _, err := io.ReadFull(br, rest); err != nil {
			return fmt.Errorf("%w: local snapshot header: %v", ErrCorrupt, err)
		}
		cur := Cursor(rest[:len(rest)-16])
		term := binary.LittleEndian.Uint64(rest[len(rest)-16:])
		gen := binary.LittleEndian.Uint64(rest[len(rest)-8:])
		pos, ok := snapshotPosition(br)
		if !ok {
			return fmt.Errorf("%w: local snapshot header", ErrCorrupt)
		}
		if pos < atLeast || gen < minGen {
			return errOlder
		}
		var left int64
		if l, ok := r.(interface{ Len() int }); ok {
			left = int64(l.Len() + br.Buffered())
		}
		if err := try(&sizedReader{r: br, left: left}); err != nil {
			return err
		}
		ss.loaded(pos, cur, term, gen, true)
		return nil
	})
}

// snapshotPosition reads the position from a snapshot's header (magic
// "BGSNAP", version u16, position u64 little-endian: bloomgate's snapshot
// format) without consuming it.
func snapshotPosition(br *bufio.Reader) (changefeed.Position, bool) {
	hdr, err := br.Peek(16)
	if err != nil || string(hdr[:6]) != "BGSNAP" {
		return 0, false
	}
	return changefeed.Position(binary.LittleEndian.Uint64(hdr[8:])), true
}

// sizedReader reports the bytes left of a snapshot of known size, so the
// snapshot decoder allocates the filter's table at once instead of growing
// it as it reads.
type sizedReader struct {
	r    io.Reader
	left int64
}

func (s *sizedReader) Read(p []byte) (int, error) {
	n, err := s.r.Read(p)
	s.left -= int64(n)
	return n, err
}

// Len reports the bytes not yet read.
func (s *sizedReader) Len() int { return int(max(s.left, 0)) }

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
