package durable_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
	"github.com/bloomgate/bloomgate/serve/durable/durabletest"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// The records and entries of these tests: a body is "rec:" and a text; an
// entry is "ent:" and a text. Anything else is malformed.
type texts struct {
	snapLSN uint64
	entries []string
	records []string // "lsn text"
}

func (x *texts) LoadSnapshot(r *durable.SnapshotReader) error {
	var got []string
	for {
		e, err := r.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		b, err := io.ReadAll(e)
		if err != nil {
			return err
		}
		t, ok := strings.CutPrefix(string(b), "ent:")
		if !ok {
			return fmt.Errorf("entry %q: %w", b, durable.ErrMalformed)
		}
		got = append(got, t)
	}
	x.entries, x.snapLSN = got, r.NextLSN()
	return nil
}

func (x *texts) Record(lsn uint64, body []byte) error {
	t, ok := strings.CutPrefix(string(body), "rec:")
	if !ok {
		return fmt.Errorf("record %q: %w", body, durable.ErrMalformed)
	}
	if lsn >= x.snapLSN {
		x.records = append(x.records, fmt.Sprint(lsn, " ", t))
	}
	return nil
}

func body(t string) func([]byte) []byte {
	return func(b []byte) []byte { return append(append(b, "rec:"...), t...) }
}

var testOpts = durable.Options{MaxRecord: 1 << 20, MaxEntry: 1 << 20}

func open(t *testing.T, dir string, opts durable.Options) (*durable.Log, *texts) {
	t.Helper()
	x := &texts{}
	l, err := durable.Open(dir, opts, x)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l, x
}

func appendAll(t *testing.T, l *durable.Log, ts ...string) {
	t.Helper()
	for _, s := range ts {
		if _, _, err := l.Append(body(s)); err != nil {
			t.Fatal(err)
		}
	}
}

func writeEntries(ents ...string) func(*durable.SnapshotWriter) error {
	return func(w *durable.SnapshotWriter) error {
		for _, e := range ents {
			ew, err := w.Entry(uint64(len("ent:" + e)))
			if err != nil {
				return err
			}
			if _, err := io.WriteString(ew, "ent:"+e); err != nil {
				return err
			}
		}
		return nil
	}
}

// TestRoundTrip: records come back in order with their LSNs, a snapshot's
// entries with its next LSN, and the LSNs go on after a restart.
func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, dir, testOpts)
	appendAll(t, l, "a", "b")
	if err := l.Snapshot(writeEntries("A", "B")); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, "c")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	l, x := open(t, dir, testOpts)
	if fmt.Sprint(x.entries, x.snapLSN, x.records) != "[A B] 3 [3 c]" {
		t.Errorf("read back: entries %v, next LSN %d, records %v", x.entries, x.snapLSN, x.records)
	}
	if lsn, _, err := l.Append(body("d")); err != nil || lsn != 4 {
		t.Errorf("Append after a restart: LSN %d, %v; want 4", lsn, err)
	}
}

// TestGolden pins the bytes of a segment and a snapshot (see the package
// doc): a change of format is never silent.
func TestGolden(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, dir, testOpts)
	appendAll(t, l, "one", "two")
	if err := l.Snapshot(writeEntries("x", "yy")); err != nil {
		t.Fatal(err)
	}
	segs, _ := durable.Segments(dir)
	snaps, _ := durable.Snapshots(dir)
	seg, _ := os.ReadFile(segs[0])
	snap, _ := os.ReadFile(snaps[0])
	for name, got := range map[string][]byte{"segment.golden": seg, "snapshot.golden": snap} {
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run with -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s changed: %x, golden %x; if intended, run with -update", name, got, want)
		}
	}
}

// segmentOf writes the records ts with Append and returns the path of the
// segment holding them, the log abandoned as a crash leaves it.
func segmentOf(t *testing.T, dir string, ts ...string) string {
	t.Helper()
	l, err := durable.Open(dir, testOpts, &texts{})
	if err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, ts...)
	l.Abandon()
	segs, _ := durable.Segments(dir)
	return segs[len(segs)-1]
}

// TestTornTail: what a crash leaves after the last whole record is cut
// off at Open, and every record before it is kept.
func TestTornTail(t *testing.T) {
	whole := durable.AppendFrame(nil, 9, body("torn"))
	for name, tail := range map[string][]byte{
		"short header":      whole[:10],
		"payload cut short": whole[:len(whole)-2],
		"zero-filled":       make([]byte, 100),
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			path := segmentOf(t, dir, "a", "b")
			durabletest.AppendFile(t, path, tail)
			_, x := open(t, dir, testOpts)
			if fmt.Sprint(x.records) != "[1 a 2 b]" {
				t.Errorf("records %v", x.records)
			}
			if fi, _ := os.Stat(path); fi.Size() != int64(len(durable.SegmentMagic)+2*len(durable.AppendFrame(nil, 1, body("a")))) {
				t.Errorf("segment of %d bytes after the truncation", fi.Size())
			}
		})
	}
}

// TestDamageStops: a damaged record, a record whose body does not decode,
// and a torn record before the last segment stop Open with a
// *durable.LogDamageError at its offset; Check reports it, and a repair keeps
// every other record.
func TestDamageStops(t *testing.T) {
	rec := len(durable.AppendFrame(nil, 1, body("a")))
	for _, tt := range []struct {
		name  string
		spoil func(path string)
		kept  string
	}{
		{"payload", func(path string) {
			durabletest.FlipByte(t, path, int64(len(durable.SegmentMagic)+rec+durable.RecordHeaderLen+9))
		}, "[1 a 3 c]"},
		{"header", func(path string) { durabletest.FlipByte(t, path, int64(len(durable.SegmentMagic)+rec+2)) }, "[1 a 3 c]"},
		{"malformed body", func(path string) {
			data, _ := os.ReadFile(path)
			bad := durable.AppendFrame(nil, 2, func(b []byte) []byte { return append(b, "bad:b"...) })
			copy(data[len(durable.SegmentMagic)+rec:], bad)
			os.WriteFile(path, data, 0o644)
		}, "[1 a 3 c]"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := segmentOf(t, dir, "a", "b", "c")
			tt.spoil(path)
			_, err := durable.Open(dir, testOpts, &texts{})
			var de *durable.LogDamageError
			if !errors.As(err, &de) || de.Offset != int64(len(durable.SegmentMagic)+rec) || de.Path != path || de.LastGood != 1 {
				t.Fatalf("Open: %v (%+v), want damage at offset %d after LSN 1", err, de, len(durable.SegmentMagic)+rec)
			}
			rep, err := durable.Check(dir, true, testOpts, &texts{})
			if err != nil || rep.Backup == "" || rep.Segments[0].Kept != 1 {
				t.Fatalf("Check -repair: %+v, %v", rep, err)
			}
			_, x := open(t, dir, testOpts)
			if fmt.Sprint(x.records) != tt.kept {
				t.Errorf("after the repair: %v, want %s", x.records, tt.kept)
			}
		})
	}
	t.Run("torn before the last segment", func(t *testing.T) {
		dir := t.TempDir()
		path := segmentOf(t, dir, "a")
		durabletest.AppendFile(t, path, durable.AppendFrame(nil, 2, body("b"))[:10])
		later := filepath.Join(dir, durable.SegmentName(2))
		if err := os.WriteFile(later, durable.AppendFrame([]byte(durable.SegmentMagic), 3, body("c")), 0o644); err != nil {
			t.Fatal(err)
		}
		var de *durable.LogDamageError
		if _, err := durable.Open(dir, testOpts, &texts{}); !errors.As(err, &de) || de.NextFiles != 1 {
			t.Fatalf("Open: %v, want damage with 1 later file", err)
		}
	})
}

// TestSnapshotFallback: a damaged newest snapshot is passed over for the
// older one and the log since it; with every snapshot damaged and the log
// cut, Open stops with durable.ErrCorruptSnapshot.
func TestSnapshotFallback(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, dir, testOpts)
	appendAll(t, l, "a")
	if err := l.Snapshot(writeEntries("A")); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, "b")
	if err := l.Snapshot(writeEntries("A", "B")); err != nil {
		t.Fatal(err)
	}
	appendAll(t, l, "c")
	l.Abandon()
	snaps, _ := durable.Snapshots(dir)
	durabletest.FlipByte(t, snaps[0], 20)
	l, x := open(t, dir, testOpts)
	if fmt.Sprint(x.entries, x.records) != "[A] [2 b 3 c]" {
		t.Errorf("fallen back to %v and %v", x.entries, x.records)
	}
	if _, err := os.Stat(snaps[0] + durable.DamagedSuffix); err != nil {
		t.Error("the damaged snapshot is not kept aside")
	}
	// Two more snapshots cut the log; then damage both.
	for range 2 {
		if err := l.Snapshot(writeEntries("A", "B", "C")); err != nil {
			t.Fatal(err)
		}
	}
	l.Abandon()
	snaps, _ = durable.Snapshots(dir)
	for _, s := range snaps {
		durabletest.FlipByte(t, s, 20)
	}
	if _, err := durable.Open(dir, testOpts, &texts{}); !errors.Is(err, durable.ErrCorruptSnapshot) {
		t.Fatalf("Open with every snapshot damaged: %v", err)
	}
}

// TestSnapshotEntryLength: an entry written short or long fails the
// snapshot, and the previous one stays.
func TestSnapshotEntryLength(t *testing.T) {
	for name, write := range map[string]func(*durable.SnapshotWriter) error{
		"short": func(w *durable.SnapshotWriter) error { _, err := w.Entry(10); return err },
		"long": func(w *durable.SnapshotWriter) error {
			ew, _ := w.Entry(2)
			_, err := ew.Write([]byte("ent:x"))
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			l, _ := open(t, dir, testOpts)
			if err := l.Snapshot(write); err == nil {
				t.Fatal("snapshot with a wrong entry length succeeded")
			}
			if snaps, _ := durable.Snapshots(dir); len(snaps) != 0 {
				t.Errorf("a failed snapshot left %v", snaps)
			}
		})
	}
}

// TestFullDisk: a record that could not be written leaves nothing in the
// log, and the next one succeeds once there is room, without a restart.
func TestFullDisk(t *testing.T) {
	dir := t.TempDir()
	fs := &durabletest.FaultFS{}
	l, _ := open(t, dir, durable.Options{MaxRecord: 1 << 20, MaxEntry: 1 << 20, FS: fs})
	appendAll(t, l, "a")
	fs.Full.Store(true)
	if _, _, err := l.Append(body("refused")); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("Append on a full disk: %v", err)
	}
	fs.Full.Store(false)
	appendAll(t, l, "b")
	l.Abandon()
	_, x := open(t, dir, testOpts)
	if fmt.Sprint(x.records) != "[1 a 2 b]" {
		t.Errorf("records %v, want a and b only", x.records)
	}
}

// TestFailedFsync: after a failed fsync Commit waits for the snapshot that
// holds everything, records are refused until then, and accepted after.
func TestFailedFsync(t *testing.T) {
	dir := t.TempDir()
	fs := &durabletest.FaultFS{}
	l, _ := open(t, dir, durable.Options{MaxRecord: 1 << 20, MaxEntry: 1 << 20, FS: fs, Fsync: durable.FsyncAlways})
	_, pos, err := l.Append(body("a"))
	if err != nil {
		t.Fatal(err)
	}
	fs.SyncFails.Store(true)
	if err := l.Commit(pos, 50*time.Millisecond); !errors.Is(err, syscall.EIO) {
		t.Fatalf("Commit with a failed fsync and no snapshot: %v, want the fsync's error", err)
	}
	if _, _, err := l.Append(body("refused")); !errors.Is(err, syscall.EIO) || l.Failure() == nil {
		t.Fatalf("Append after a failed fsync: %v", err)
	}
	fs.SyncFails.Store(false)
	done := make(chan error, 1)
	go func() { done <- l.Commit(pos, time.Minute) }()
	if err := l.Snapshot(writeEntries("A")); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatalf("Commit once a snapshot recovered: %v", err)
	}
	appendAll(t, l, "b")
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := l.Append(body("closed")); !errors.Is(err, durable.ErrClosed) {
		t.Errorf("Append after Close: %v", err)
	}
}

func TestLocked(t *testing.T) {
	dir := t.TempDir()
	open(t, dir, testOpts)
	if _, err := durable.Open(dir, testOpts, &texts{}); !errors.Is(err, durable.ErrLocked) {
		t.Fatalf("second Open: %v, want durable.ErrLocked", err)
	}
	if _, err := durable.Check(dir, false, testOpts, &texts{}); !errors.Is(err, durable.ErrLocked) {
		t.Fatalf("Check of a directory in use: %v, want durable.ErrLocked", err)
	}
}

// FuzzReadSegment feeds arbitrary bytes to the segment reader: it must
// never panic, never report a good offset past the data, end clean exactly
// when every byte was read, and find records again only inside the data.
func FuzzReadSegment(f *testing.F) {
	seg := []byte(durable.SegmentMagic)
	for i, s := range []string{"a", "bb", "ccc"} {
		seg = durable.AppendFrame(seg, uint64(i+1), body(s))
	}
	f.Add(seg)
	f.Add(seg[:len(seg)-3])
	f.Add(seg[len(durable.SegmentMagic):]) // legacy-looking
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		x := &texts{}
		sc, err := durable.ReadSegmentRaw(bytes.NewReader(data), int64(len(data)), 1<<20, x.Record)
		if err != nil {
			t.Fatalf("readSegment from memory: %v", err)
		}
		if sc.Good() > int64(len(data)) || sc.Clean() != (sc.Good() == int64(len(data))) || sc.Records() != len(x.records) {
			t.Fatalf("good offset %d of %d bytes, clean %v, %d records (%d seen)", sc.Good(), len(data), sc.Clean(), sc.Records(), len(x.records))
		}
		if next := durable.NextGoodRecord(data, 0, 1<<20, x.Record); next > int64(len(data)) {
			t.Fatalf("next good record at %d past %d bytes", next, len(data))
		}
	})
}

// FuzzSnapshotReader feeds arbitrary bytes to the snapshot reader.
func FuzzSnapshotReader(f *testing.F) {
	var good bytes.Buffer
	durable.WriteSnapshot(&good, 7, writeEntries("a", "bb"))
	f.Add(good.Bytes())
	f.Add(good.Bytes()[:good.Len()-3])
	f.Add(binary.LittleEndian.AppendUint64([]byte(durable.SnapshotMagic), 1))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := durable.NewSnapshotReader(bytes.NewReader(data), int64(len(data)), 1<<20)
		if err != nil {
			return
		}
		x := &texts{}
		if err := x.LoadSnapshot(r); err == nil && len(x.entries) != r.Entries() {
			t.Fatalf("%d entries read, %d counted", len(x.entries), r.Entries())
		}
	})
}

// syncGateFS creates real segment files whose fsyncs wait for release,
// and records the order of their writes and fsyncs.
type syncGateFS struct {
	release chan struct{}
	mu      sync.Mutex
	ops     []string
}

func (fs *syncGateFS) Create(path string) (durable.File, error) {
	f, err := durable.OSFS{}.Create(path)
	if err != nil {
		return nil, err
	}
	return &syncGateFile{f, fs}, nil
}

func (fs *syncGateFS) op(s string) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	fs.ops = append(fs.ops, s)
}

type syncGateFile struct {
	durable.File
	fs *syncGateFS
}

func (f *syncGateFile) Write(p []byte) (int, error) {
	f.fs.op(fmt.Sprintf("write %d", len(p)))
	return f.File.Write(p)
}

func (f *syncGateFile) Sync() error {
	<-f.fs.release
	f.fs.op("sync")
	return f.File.Sync()
}

// TestOpenDoesNotWaitForTheNewSegment: Open returns (a server listens)
// while the new segment is still being made durable, and a record is
// written only after its segment's header is fsynced.
func TestOpenDoesNotWaitForTheNewSegment(t *testing.T) {
	dir := t.TempDir()
	l, _ := open(t, dir, testOpts)
	appendAll(t, l, "a")
	l.Close()

	fs := &syncGateFS{release: make(chan struct{})}
	opened := make(chan *durable.Log, 1)
	x := &texts{}
	go func() {
		l, err := durable.Open(dir, durable.Options{MaxRecord: 1 << 20, MaxEntry: 1 << 20, FS: fs}, x)
		if err != nil {
			t.Error(err)
		}
		opened <- l
	}()
	select {
	case l = <-opened:
	case <-time.After(10 * time.Second):
		close(fs.release)
		t.Fatal("Open waited for the new segment's fsync")
	}
	if l == nil {
		return
	}
	if fmt.Sprint(x.records) != "[1 a]" {
		t.Errorf("recovered %v", x.records)
	}
	appended := make(chan error, 1)
	go func() { _, _, err := l.Append(body("b")); appended <- err }()
	close(fs.release)
	if err := <-appended; err != nil {
		t.Fatal(err)
	}
	fs.mu.Lock()
	ops := fmt.Sprint(fs.ops)
	fs.mu.Unlock()
	if want := fmt.Sprintf("[write %d sync write", len(durable.SegmentMagic)); !strings.HasPrefix(ops, want) {
		t.Errorf("segment operations %s, want the header written and fsynced before the record (%s …)", ops, want)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	_, y := open(t, dir, testOpts)
	if fmt.Sprint(y.records) != "[1 a 2 b]" {
		t.Errorf("records %v after a restart, want a and b", y.records)
	}
}
