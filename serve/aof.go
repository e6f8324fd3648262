package serve

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/bloomgate/bloomgate/internal/atomicfile"
	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// The log is a sequence of segment files, log-<n>.aof in DataDir. A snapshot
// starts a new segment; once the snapshot is durable, older segments are
// deleted. Every record carries a log sequence number (LSN), and each key
// remembers the LSN of the last record applied to it (saved in the
// snapshot), so replay skips records a snapshot already holds.

const (
	segmentPrefix = "log-"
	segmentSuffix = ".aof"
)

// appendLog appends records to the current segment. Lock order: syncMu,
// then mu.
type appendLog struct {
	dir string

	mu       sync.Mutex
	f        *os.File
	seg      uint64
	nextLSN  uint64
	written  int64 // bytes written to all segments since start
	segStart int64 // written when the current segment began
	buf      []byte
	failed   error // a failed write: the log refuses further records

	syncMu sync.Mutex
	synced atomic.Int64
}

func segmentName(seg uint64) string {
	return fmt.Sprintf("%s%016d%s", segmentPrefix, seg, segmentSuffix)
}

// listSegments returns the segment numbers in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var segs []uint64
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), segmentPrefix)
		if !ok {
			continue
		}
		n, ok = strings.CutSuffix(n, segmentSuffix)
		if !ok {
			continue
		}
		if seg, err := strconv.ParseUint(n, 10, 64); err == nil {
			segs = append(segs, seg)
		}
	}
	slices.Sort(segs)
	return segs, nil
}

// openLog starts segment seg in dir.
func openLog(dir string, seg, nextLSN uint64) (*appendLog, error) {
	l := &appendLog{dir: dir, nextLSN: nextLSN}
	if err := l.openSegment(seg); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *appendLog) openSegment(seg uint64) error {
	f, err := os.OpenFile(filepath.Join(l.dir, segmentName(seg)), os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if err := atomicfile.SyncDir(l.dir); err != nil {
		f.Close()
		return err
	}
	l.f, l.seg, l.segStart = f, seg, l.written
	return nil
}

// append writes r (stamping its LSN) and returns the log position after it.
func (l *appendLog) append(r *record) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return 0, l.failed
	}
	r.lsn = l.nextLSN
	l.buf = r.appendFrame(l.buf[:0])
	if _, err := l.f.Write(l.buf); err != nil {
		// A partly written record would hide every later one from replay.
		l.failed = fmt.Errorf("serve: log write failed, writes refused until restart: %w", err)
		return 0, l.failed
	}
	l.nextLSN++
	l.written += int64(len(l.buf))
	if cap(l.buf) > 1<<20 {
		l.buf = nil
	}
	return l.written, nil
}

// syncTo returns once the log is fsynced up to position pos. Concurrent
// callers share one fsync.
func (l *appendLog) syncTo(pos int64) error {
	if l.synced.Load() >= pos {
		return nil
	}
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	if l.synced.Load() >= pos {
		return nil
	}
	l.mu.Lock()
	f, target, failed := l.f, l.written, l.failed
	l.mu.Unlock()
	if failed != nil {
		return failed
	}
	if err := f.Sync(); err != nil {
		l.mu.Lock()
		l.failed = fmt.Errorf("serve: log fsync failed, writes refused until restart: %w", err)
		l.mu.Unlock()
		return err
	}
	l.synced.Store(target)
	return nil
}

// sync fsyncs everything written so far.
func (l *appendLog) sync() error {
	l.mu.Lock()
	pos := l.written
	l.mu.Unlock()
	return l.syncTo(pos)
}

// rotate fsyncs and closes the current segment, starts the next one and
// returns its number and the next LSN.
func (l *appendLog) rotate() (uint64, uint64, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return 0, 0, l.failed
	}
	if err := l.f.Sync(); err != nil {
		return 0, 0, err
	}
	l.synced.Store(l.written)
	old := l.f
	if err := l.openSegment(l.seg + 1); err != nil {
		return 0, 0, err
	}
	old.Close()
	return l.seg, l.nextLSN, nil
}

// sizeSinceRotate returns the bytes in the current segment.
func (l *appendLog) sizeSinceRotate() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written - l.segStart
}

// removeBefore deletes the segments older than seg.
func (l *appendLog) removeBefore(seg uint64) error {
	segs, err := listSegments(l.dir)
	if err != nil {
		return err
	}
	for _, s := range segs {
		if s < seg {
			if err := os.Remove(filepath.Join(l.dir, segmentName(s))); err != nil {
				return err
			}
		}
	}
	return atomicfile.SyncDir(l.dir)
}

func (l *appendLog) close() error {
	err := l.sync()
	l.mu.Lock()
	defer l.mu.Unlock()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	if l.failed == nil {
		l.failed = ErrClosed
	}
	return err
}

// errTornRecord reports a record cut short or failing its checksum.
var errTornRecord = errors.New("serve: torn or damaged log record")

// readRecords calls fn for each record of a log segment of size bytes. It
// returns the offset after the last good record and errTornRecord (wrapped)
// when a bad record follows it; maxRecord bounds a record's payload.
func readRecords(r io.Reader, size, maxRecord int64, fn func(*record) error) (int64, error) {
	var off int64
	var hdr [recordHeaderLen]byte
	for off < size {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return off, fmt.Errorf("%w at offset %d: short header", errTornRecord, off)
		}
		un := binary.LittleEndian.Uint64(hdr[:])
		sum := binary.LittleEndian.Uint32(hdr[8:])
		if un > uint64(size-off-recordHeaderLen) || un > uint64(maxRecord) {
			return off, fmt.Errorf("%w at offset %d: length %d past the end", errTornRecord, off, un)
		}
		n := int64(un)
		payload := make([]byte, n)
		if _, err := io.ReadFull(r, payload); err != nil {
			return off, fmt.Errorf("%w at offset %d: short payload", errTornRecord, off)
		}
		if crc32c.Checksum(payload) != sum {
			return off, fmt.Errorf("%w at offset %d: checksum mismatch", errTornRecord, off)
		}
		rec, err := decodePayload(payload)
		if err != nil {
			return off, fmt.Errorf("%w at offset %d: %w", errTornRecord, off, err)
		}
		if err := fn(rec); err != nil {
			return off, err
		}
		off += recordHeaderLen + n
	}
	return off, nil
}
