package jetstream

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrReadOnly is returned by the Save of an instance's snapshot store: only
// the feeder uploads snapshots.
var ErrReadOnly = errors.New("jetstream: instances do not save snapshots (the feeder does)")

// record is the "snapshot" key's value.
type record struct {
	Position changefeed.Position `json:"lsn"`
	// Start is the stream sequence to read first after the snapshot.
	Start  uint64 `json:"seq"`
	Object string `json:"object"`
}

// snapshots is a bloomgate.SnapshotStore over the set's object store and
// its "snapshot" record. startOf (the feeder's) maps a position to its
// stream sequence; nil makes the store read-only.
type snapshots struct {
	s       *Set
	startOf func(changefeed.Position) (uint64, bool)
	local   bloomgate.SnapshotStore // an instance's own snapshots, or nil
}

var _ bloomgate.SnapshotStore = (*snapshots)(nil)

// Save uploads the snapshot, then moves the record forward to it (by
// revision; a record at or beyond pos is left alone), then deletes objects
// no longer in the record's history.
func (ss *snapshots) Save(ctx context.Context, pos changefeed.Position, write func(io.Writer) error) error {
	if ss.startOf == nil {
		if ss.local != nil {
			return ss.local.Save(ctx, pos, write)
		}
		return ErrReadOnly
	}
	start, ok := ss.startOf(pos)
	if !ok {
		return fmt.Errorf("jetstream: snapshot at %v: no stream sequence known for it", pos)
	}
	name := fmt.Sprintf("%016x", uint64(pos))
	pr, pw := io.Pipe()
	go func() {
		bw := bufio.NewWriterSize(pw, 1<<17)
		err := write(bw)
		if err == nil {
			err = bw.Flush()
		}
		pw.CloseWithError(err)
	}()
	_, err := ss.s.objects.Put(ctx, js.ObjectMeta{Name: name}, pr)
	pr.CloseWithError(err) // unblocks the writer if Put gave up early
	if err != nil {
		return fmt.Errorf("jetstream: snapshot upload: %w", err)
	}
	val, _ := json.Marshal(record{Position: pos, Start: start, Object: name})
	for {
		e, err := ss.s.pos.Get(ctx, keySnapshot)
		switch {
		case errors.Is(err, js.ErrKeyNotFound):
			_, err = ss.s.pos.Create(ctx, keySnapshot, val)
		case err != nil:
			return fmt.Errorf("jetstream: snapshot record: %w", err)
		default:
			var cur record
			if json.Unmarshal(e.Value(), &cur) == nil && cur.Position >= pos {
				return nil // a newer snapshot is recorded already
			}
			_, err = ss.s.pos.Update(ctx, keySnapshot, val, e.Revision())
		}
		if err == nil {
			break
		}
		if !errors.Is(err, js.ErrKeyExists) && !errors.Is(err, js.ErrKeyRevisionMismatch) {
			return fmt.Errorf("jetstream: snapshot record: %w", err)
		}
	}
	ss.prune(ctx)
	return nil
}

// records returns the snapshot records, newest first.
func (ss *snapshots) records(ctx context.Context) ([]record, error) {
	hist, err := ss.s.pos.History(ctx, keySnapshot)
	if errors.Is(err, js.ErrKeyNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("jetstream: snapshot records: %w", err)
	}
	var recs []record
	for _, e := range slices.Backward(hist) {
		var r record
		if e.Operation() == js.KeyValuePut && json.Unmarshal(e.Value(), &r) == nil && r.Object != "" {
			recs = append(recs, r)
		}
	}
	return recs, nil
}

// prune deletes objects that no record in the history names (keeping the
// two newest records' objects at least). Failures only leave objects
// behind.
func (ss *snapshots) prune(ctx context.Context) {
	recs, err := ss.records(ctx)
	if err != nil || len(recs) == 0 {
		return
	}
	keep := map[string]bool{}
	for _, r := range recs[:min(2, len(recs))] {
		keep[r.Object] = true
	}
	infos, err := ss.s.objects.List(ctx)
	if err != nil {
		return
	}
	for _, o := range infos {
		// Names are fixed-width hex positions: an object newer than the
		// newest record is an upload in progress (another feeder's).
		if !keep[o.Name] && o.Name < recs[0].Object {
			ss.s.objects.Delete(ctx, o.Name)
		}
	}
}

// errOlder skips a local snapshot older than the feeder's newest.
var errOlder = errors.New("jetstream: local snapshot older than the feeder's")

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

// Load tries the newest local snapshot when it is at least as new as the
// feeder's newest, then the recorded (feeder's) snapshots, newest first,
// then any local one.
func (ss *snapshots) Load(ctx context.Context, try func(r io.Reader) error) error {
	recs, err := ss.records(ctx)
	if err != nil && ss.local == nil {
		return err
	}
	errs := []error{bloomgate.ErrNoSnapshot}
	if err != nil {
		errs = append(errs, err)
	}
	if ss.local != nil {
		var newest changefeed.Position
		if len(recs) > 0 {
			newest = recs[0].Position
		}
		lerr := ss.local.Load(ctx, func(r io.Reader) error {
			br := bufio.NewReaderSize(r, 1<<16)
			if pos, ok := snapshotPosition(br); ok && pos < newest {
				return errOlder
			}
			return try(br)
		})
		if lerr == nil {
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, lerr)
	}
	for _, r := range recs {
		err := ss.tryOne(ctx, r, try)
		if err == nil {
			ss.s.starts.put(r.Position, r.Start)
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		errs = append(errs, fmt.Errorf("%s: %w", r.Object, err))
	}
	if ss.local != nil && len(recs) > 0 {
		// The feeder's failed: an older local one beats none.
		if err := ss.local.Load(ctx, try); err == nil {
			return nil
		}
	}
	return errors.Join(errs...)
}

func (ss *snapshots) tryOne(ctx context.Context, r record, try func(io.Reader) error) error {
	res, err := ss.s.objects.Get(ctx, r.Object)
	if err != nil {
		return err
	}
	defer res.Close()
	var size int64
	if info, err := res.Info(); err == nil {
		size = int64(info.Size)
	}
	return try(&sizedReader{r: bufio.NewReaderSize(res, 1<<17), left: size})
}

// sizedReader reports the bytes left of an object of known size, so the
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
