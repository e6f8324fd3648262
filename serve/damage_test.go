package serve

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/internal/crc32c"
	"github.com/bloomgate/bloomgate/serve/durable"
	"github.com/bloomgate/bloomgate/serve/durable/durabletest"
)

// The log format (see package durable): a segment's magic, a record's
// frame header.
const (
	segmentMagicLen = 8
	recordHeaderLen = 16
)

// writeSeries writes a BF.RESERVE of "first", then n single-item BF.ADDs to
// "bf" (one record each: "bf" is created by the first), and crashes: the log
// alone holds them. It returns the segment's path and the offset of each
// record.
func writeSeries(t *testing.T, dir string, n int) (string, []int64) {
	t.Helper()
	s, err := Open(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve("first", BloomParams{Capacity: 10, ErrorRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	for _, it := range items("s", n) {
		if _, _, err := s.Add("bf", [][]byte{it}, AddOptions{Create: BloomParams{Capacity: 1000}}); err != nil {
			t.Fatal(err)
		}
	}
	crash(s)
	path := lastSegment(t, dir)
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var offs []int64
	for off := int64(segmentMagicLen); off < int64(len(data)); {
		offs = append(offs, off)
		off += recordHeaderLen + int64(binary.LittleEndian.Uint64(data[off:]))
	}
	return path, offs
}

// TestLogDamage flips one byte at the start, in the middle and at the end of
// the log. The start must stop with an error naming the file, the offset and
// the check subcommand (not take it for a torn tail and drop the rest);
// Check must report it; a repair must keep a byte-for-byte copy and every
// record but the damaged one.
func TestLogDamage(t *testing.T) {
	const n = 300
	// Records: 0 creates "first", 1 creates "bf", 2+i adds item s<i>.
	for _, tt := range []struct {
		name   string
		record int   // the damaged record
		at     int64 // offset of the flipped byte in it
		lost   int   // the item lost with it, -1 for none
	}{
		{"start", 0, recordHeaderLen + 3, -1},
		{"middle header", n / 2, 2, n/2 - 2},
		{"middle payload", n / 2, recordHeaderLen + 20, n/2 - 2},
		{"end", n + 1, recordHeaderLen + 10, n - 1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, offs := writeSeries(t, dir, n)
			orig, _ := os.ReadFile(path)
			durabletest.FlipByte(t, path, offs[tt.record]+tt.at)

			_, err := Open(Config{DataDir: dir})
			var de *LogDamageError
			if !errors.As(err, &de) || !errors.Is(err, ErrLogDamaged) {
				t.Fatalf("Open with a damaged log: %v, want a *LogDamageError", err)
			}
			if de.Offset != offs[tt.record] || de.Path != path {
				t.Errorf("damage reported at %s offset %d, want %s offset %d", de.Path, de.Offset, path, offs[tt.record])
			}
			for _, want := range []string{filepath.Base(path), fmt.Sprintf("offset %d", offs[tt.record]), "bloomgate serve check"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not name %q", err, want)
				}
			}

			rep, err := Check(dir, false, 0)
			if err != nil {
				t.Fatal(err)
			}
			seg := rep.Segments[len(rep.Segments)-1]
			if rep.OK() || !seg.Damaged || seg.Offset != offs[tt.record] || seg.Kept != len(offs)-tt.record-1 {
				t.Errorf("Check: %+v, want damaged at %d keeping %d records", seg, offs[tt.record], len(offs)-tt.record-1)
			}
			if after, _ := os.ReadFile(path); bytes.Equal(after, orig) {
				t.Fatal("the flip did not change the file")
			}

			rep, err = Check(dir, true, 0)
			if err != nil {
				t.Fatal(err)
			}
			copied, err := os.ReadFile(filepath.Join(rep.Backup, filepath.Base(path)))
			if err != nil {
				t.Fatalf("no copy of the damaged file: %v", err)
			}
			damaged := bytes.Clone(orig)
			damaged[offs[tt.record]+tt.at] ^= 0x20
			if !bytes.Equal(copied, damaged) {
				t.Error("the copy differs from the damaged file")
			}
			if rep, _ := Check(dir, false, 0); !rep.OK() {
				t.Errorf("after the repair Check still finds damage: %+v", rep.Segments)
			}

			s := openStore(t, Config{DataDir: dir})
			for i, ok := range held(s.MayContain("bf", items("s", n))) {
				if !ok && i != tt.lost {
					t.Fatalf("item s%d lost, only s%d may be", i, tt.lost)
				}
			}
			if want := tt.record != 0; (s.Type("first") == KindBloom) != want {
				t.Errorf("key first exists = %v, want %v", !want, want)
			}
		})
	}
}

// TestTornTails: an incomplete last record is truncated with a warning that
// says so, and nothing before it is lost.
func TestTornTails(t *testing.T) {
	hdr := func(n uint64) []byte {
		b := binary.LittleEndian.AppendUint64(nil, n)
		b = binary.LittleEndian.AppendUint32(b, 0)
		return binary.LittleEndian.AppendUint32(b, crc32cOf(b))
	}
	for _, tt := range []struct {
		name string
		tail []byte
	}{
		{"short header", []byte{200, 0, 0, 0, 0, 0, 0, 0, 1, 2}},
		{"payload cut short", append(hdr(200), make([]byte, 50)...)},
		{"zero-filled", make([]byte, 300)},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, _ := writeSeries(t, dir, 50)
			durabletest.AppendFile(t, path, tt.tail)
			var logBuf bytes.Buffer
			s := openStore(t, Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
			for i, ok := range held(s.MayContain("bf", items("s", 50))) {
				if !ok {
					t.Fatalf("s%d lost", i)
				}
			}
			if !strings.Contains(logBuf.String(), "incomplete record") {
				t.Errorf("no warning about the incomplete record; log:\n%s", logBuf.String())
			}
		})
	}
}

// TestCorruptNewestSnapshot: a damaged newest snapshot is passed over for
// the one before it plus the log, and nothing is lost.
func TestCorruptNewestSnapshot(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add("bf2", items("between", 50), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add("bf2", items("after", 50), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	crash(s)
	newest := newestSnapshot(t, dir)
	corrupt(t, newest)

	var logBuf bytes.Buffer
	r := openStore(t, Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	check(t, r)
	for _, it := range [][][]byte{items("between", 50), items("after", 50)} {
		for i, ok := range held(r.MayContain("bf2", it)) {
			if !ok {
				t.Fatalf("%s lost", it[i])
			}
		}
	}
	if !strings.Contains(logBuf.String(), "snapshot is damaged") {
		t.Errorf("no word of the damaged snapshot; log:\n%s", logBuf.String())
	}
	if _, err := os.Stat(newest + ".damaged"); err != nil {
		t.Errorf("the damaged snapshot is not kept aside: %v", err)
	}
}

// TestCorruptOnlySnapshot: with one snapshot the log is kept from its first
// segment, so a damaged snapshot costs nothing.
func TestCorruptOnlySnapshot(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{DataDir: dir})
	fill(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	corrupt(t, newestSnapshot(t, dir))
	check(t, openStore(t, Config{DataDir: dir}))
}

// TestCorruptSnapshotsNoFallback: when every snapshot is damaged and the log
// no longer reaches back to the first write, the start stops with
// ErrCorruptSnapshot naming the way out; a repair moves the snapshots aside
// (keeping them) and the start goes on from the log alone.
func TestCorruptSnapshotsNoFallback(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	for range 3 {
		if err := s.Snapshot(); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := s.Add("late", items("l", 10), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	crash(s)
	gens, _ := durable.Snapshots(dir)
	for _, g := range gens {
		corrupt(t, g)
	}
	_, err = Open(Config{DataDir: dir})
	if !errors.Is(err, ErrCorruptSnapshot) || !strings.Contains(err.Error(), "bloomgate serve check") {
		t.Fatalf("Open with every snapshot damaged: %v, want ErrCorruptSnapshot naming the check subcommand", err)
	}
	rep, err := Check(dir, true, 0)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range gens {
		if _, err := os.Stat(filepath.Join(rep.Backup, filepath.Base(g))); err != nil {
			t.Errorf("damaged snapshot %s not kept: %v", g, err)
		}
	}
	r := openStore(t, Config{DataDir: dir})
	for _, ok := range held(r.MayContain("late", items("l", 10))) {
		if !ok {
			t.Fatal("a write in the log was lost")
		}
	}
}

func corrupt(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	durabletest.FlipByte(t, path, int64(len(data)/2))
}

func crc32cOf(b []byte) uint32 { return crc32c.Checksum(b) }
