package durable

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/bloomgate/bloomgate/internal/atomicfile"
)

// CheckReport is what Check found in a data directory, and what a repair
// did or would do.
type CheckReport struct {
	Dir       string
	Snapshots []SnapshotCheck // newest first
	Segments  []SegmentCheck  // oldest first
	// Backup is the directory holding a copy of every file a repair
	// changed or moved ("" when nothing was changed).
	Backup string
}

// SnapshotCheck is the state of one snapshot file.
type SnapshotCheck struct {
	Name string
	Keys int
	Err  error // nil when it reads back whole
}

// SegmentCheck is the state of one log segment.
type SegmentCheck struct {
	Name    string
	Size    int64
	Records int   // whole records, those after damage included
	Damaged bool  // a bad record before the end (a start stops)
	Torn    bool  // an incomplete last record (a start truncates it)
	Offset  int64 // where the first bad record starts
	Reason  string
	// Dropped is the bytes a repair removes: the damaged stretches (and a
	// torn tail). Kept is the records after the first damage that a repair
	// keeps, found again by their checksums.
	Dropped int64
	Kept    int
}

// OK reports whether a start would succeed and lose nothing.
func (r *CheckReport) OK() bool {
	for _, s := range r.Segments {
		if s.Damaged {
			return false
		}
	}
	for _, s := range r.Snapshots {
		if s.Err != nil {
			return false
		}
	}
	return true
}

// WriteTo writes the report for people.
func (r *CheckReport) WriteTo(w io.Writer) (int64, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "data directory %s\n", r.Dir)
	for _, s := range r.Snapshots {
		if s.Err != nil {
			fmt.Fprintf(&b, "  %s: DAMAGED: %v\n", s.Name, s.Err)
		} else {
			fmt.Fprintf(&b, "  %s: ok, %d keys\n", s.Name, s.Keys)
		}
	}
	for _, s := range r.Segments {
		switch {
		case s.Damaged:
			fmt.Fprintf(&b, "  %s: DAMAGED at offset %d of %d (%s): a repair drops %d bytes (the damaged records; an acknowledged write among them is lost) and keeps the %d whole records after them\n",
				s.Name, s.Offset, s.Size, s.Reason, s.Dropped, s.Kept)
		case s.Torn:
			fmt.Fprintf(&b, "  %s: %d records, then an incomplete record at offset %d (%s): %d bytes, never acknowledged, truncated at start or by a repair\n",
				s.Name, s.Records, s.Offset, s.Reason, s.Dropped)
		default:
			fmt.Fprintf(&b, "  %s: ok, %d records\n", s.Name, s.Records)
		}
	}
	if r.Backup != "" {
		fmt.Fprintf(&b, "repaired; the original files are in %s\n", r.Backup)
	} else if r.OK() {
		fmt.Fprintln(&b, "ok: a start loses nothing")
	}
	n, err := w.Write(b.Bytes())
	return int64(n), err
}

// Check examines the snapshots and log segments in dir, which must not be
// in use (ErrLocked otherwise), reading snapshots through rp.LoadSnapshot
// and records through rp.Record, which must only decode what they are
// given. With repair it also makes the directory startable: a damaged
// segment is rewritten without its damaged records (the whole records after
// them are kept), a torn tail is truncated, and a damaged snapshot is moved
// out of the way (the start then falls back to the one before it, or to the
// log alone). Every file changed or moved is first copied to a new
// directory repair-<time> in dir, named in the report. Of opts, Check
// reads MaxRecord and MaxEntry.
func Check(dir string, repair bool, opts Options, rp Replayer) (*CheckReport, error) {
	if _, err := os.Stat(dir); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer lock.Close()
	rep := &CheckReport{Dir: dir}
	gens, err := snapshotGens(dir)
	if err != nil {
		return nil, err
	}
	for _, g := range gens {
		keys, err := readSnapshotFile(filepath.Join(dir, g.name), opts.MaxEntry, rp.LoadSnapshot)
		if err != nil {
			keys = 0
		}
		rep.Snapshots = append(rep.Snapshots, SnapshotCheck{Name: g.name, Keys: keys, Err: err})
	}
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	repaired := map[string][]byte{}
	for i, seg := range segs {
		name := segmentName(seg)
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			return nil, err
		}
		sc, fixed := checkSegment(name, data, opts.MaxRecord, i == len(segs)-1, rp.Record)
		rep.Segments = append(rep.Segments, sc)
		if fixed != nil {
			repaired[name] = fixed
		}
	}
	if !repair {
		return rep, nil
	}
	return rep, rep.repair(repaired)
}

// repair copies the files to change to a new backup directory, then writes
// the repaired segments and moves the damaged snapshots there.
func (rep *CheckReport) repair(repaired map[string][]byte) error {
	dir := rep.Dir
	var move []string
	for _, s := range rep.Snapshots {
		if s.Err != nil {
			move = append(move, s.Name)
		}
	}
	if len(move) == 0 && len(repaired) == 0 {
		return nil
	}
	backup := filepath.Join(dir, "repair-"+time.Now().UTC().Format("20060102T150405.000000000Z"))
	if err := os.Mkdir(backup, 0o755); err != nil {
		return err
	}
	rep.Backup = backup
	for name, fixed := range repaired {
		path := filepath.Join(dir, name)
		if err := copyFile(path, filepath.Join(backup, name)); err != nil {
			return err
		}
		if err := atomicfile.Write(path, 0o644, func(w io.Writer) error {
			_, err := w.Write(fixed)
			return err
		}); err != nil {
			return err
		}
	}
	for _, name := range move {
		if err := os.Rename(filepath.Join(dir, name), filepath.Join(backup, name)); err != nil {
			return err
		}
	}
	return atomicfile.SyncDir(dir)
}

// checkSegment checks one segment and returns its repaired content when a
// repair would change it.
func checkSegment(name string, data []byte, maxRecord int64, last bool, valid RecordFunc) (SegmentCheck, []byte) {
	sc := SegmentCheck{Name: name, Size: int64(len(data))}
	scan, err := readSegment(bytes.NewReader(data), int64(len(data)), maxRecord, valid)
	if err != nil { // reading from memory cannot fail; keep the damage visible anyway
		scan.end, scan.reason = endDamaged, err.Error()
	}
	sc.Records, sc.Offset, sc.Reason = scan.records, scan.good, scan.reason
	switch {
	case scan.end == endClean:
		return sc, nil
	case scan.end == endTorn && last:
		sc.Torn = true
		sc.Dropped = int64(len(data)) - scan.good
		return sc, bytes.Clone(data[:scan.good])
	}
	sc.Damaged = true
	fixed := bytes.Clone(data[:scan.good])
	if scan.legacy || scan.good == 0 {
		// Without the header checksum records cannot be found again.
		sc.Dropped = int64(len(data)) - scan.good
		return sc, fixed
	}
	// Drop each damaged stretch, keep the whole records between them.
	off := scan.good
	for off < int64(len(data)) {
		next := nextGoodRecord(data, off+1, maxRecord, valid)
		if next < 0 {
			sc.Dropped += int64(len(data)) - off
			break
		}
		sc.Dropped += next - off
		rest := append([]byte(segmentMagic), data[next:]...)
		more, _ := readSegment(bytes.NewReader(rest), int64(len(rest)), maxRecord, valid)
		end := next + more.good - int64(len(segmentMagic))
		fixed = append(fixed, data[next:end]...)
		sc.Records += more.records
		sc.Kept += more.records
		if more.end == endClean {
			break
		}
		off = end
	}
	return sc, fixed
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	return atomicfile.Write(dst, 0o644, func(w io.Writer) error {
		_, err := io.Copy(w, in)
		return err
	})
}
