package serve

import (
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
)

// The log is a sequence of segment files, log-<n>.aof in DataDir. A snapshot
// starts a new segment; the segments older than the previous snapshot are
// then deleted (see snapshot.go). Every record carries a log sequence number
// (LSN), and each key remembers the LSN of the last record applied to it
// (saved in the snapshot), so replay skips records a snapshot already holds.
//
// A record is written to the log before it is applied in memory, under the
// key's mutex: a write whose record could not be written changes nothing and
// fails with ErrLogWrite. A partly written record is cut off again at once
// (truncate needs no free space), so when a write fails for want of space the
// next one succeeds as soon as there is room, without a restart.

const (
	segmentPrefix = "log-"
	segmentSuffix = ".aof"
)

// ErrLogWrite reports a write refused because its log record could not be
// written or synced: it was not applied and is not acknowledged. The text
// is Redis' reply to a failed AOF write; the cause follows it.
var ErrLogWrite = &Error{Code: CodeLogWrite, Msg: "errors writing to the log"}

// logFile is what the log needs of a segment file.
type logFile interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Close() error
}

// logFS creates segment files; tests inject failures (a full disk) through
// it.
type logFS interface {
	// create creates path, which must not exist, for appending.
	create(path string) (logFile, error)
}

// osFS is the real file system.
type osFS struct{}

func (osFS) create(path string) (logFile, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
}

// appendLog appends records to the current segment. Lock order: syncMu,
// then mu.
type appendLog struct {
	dir string
	fs  logFS

	mu        sync.Mutex
	f         logFile
	seg       uint64
	nextLSN   uint64
	written   int64 // bytes written to all segments since start
	segStart  int64 // written when the current segment began
	buf       []byte
	torn      bool  // a failed write left part of a record: cut it off first
	needMagic bool  // the segment header is still to be written
	failed    error // a failed fsync: records refused until a snapshot (see recovered)
	failSeg   uint64
	recoverCh chan struct{} // closed by the snapshot that recovers from failed

	syncMu sync.Mutex
	synced atomic.Int64
}

func segmentName(seg uint64) string {
	return fmt.Sprintf("%s%016d%s", segmentPrefix, seg, segmentSuffix)
}

// listNumbered returns the n of the files prefix<n>suffix in dir, ascending.
func listNumbered(dir, prefix, suffix string) ([]uint64, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []uint64
	for _, e := range ents {
		n, ok := strings.CutPrefix(e.Name(), prefix)
		if !ok {
			continue
		}
		n, ok = strings.CutSuffix(n, suffix)
		if !ok {
			continue
		}
		if v, err := strconv.ParseUint(n, 10, 64); err == nil {
			out = append(out, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// listSegments returns the segment numbers in dir, ascending.
func listSegments(dir string) ([]uint64, error) {
	return listNumbered(dir, segmentPrefix, segmentSuffix)
}

// openLog starts segment seg in dir.
func openLog(dir string, fs logFS, seg, nextLSN uint64) (*appendLog, error) {
	l := &appendLog{dir: dir, fs: fs, nextLSN: nextLSN}
	if err := l.openSegment(seg); err != nil {
		return nil, err
	}
	return l, nil
}

// openSegment creates segment seg and makes it durable. When its header
// cannot be written (a full disk), the segment stays empty and the first
// record writes the header before itself: a server starts, and serves reads,
// on a full disk.
func (l *appendLog) openSegment(seg uint64) error {
	path := filepath.Join(l.dir, segmentName(seg))
	f, err := l.fs.create(path)
	if err != nil {
		return err
	}
	if err := atomicfile.SyncDir(l.dir); err != nil {
		f.Close()
		os.Remove(path)
		return err
	}
	l.f, l.seg, l.segStart = f, seg, l.written
	l.torn, l.needMagic = false, true
	if l.writeMagic() == nil {
		l.synced.Store(l.written)
	}
	return nil
}

// writeMagic writes the segment header if it is still missing. Call with mu
// held (or before the log is shared).
func (l *appendLog) writeMagic() error {
	if !l.needMagic {
		return nil
	}
	n, err := l.f.Write([]byte(segmentMagic))
	if err == nil {
		err = l.f.Sync()
	}
	if err != nil {
		if n > 0 {
			l.torn = l.f.Truncate(0) != nil
		}
		return fmt.Errorf("%w: writing the segment header: %w", ErrLogWrite, err)
	}
	l.needMagic = false
	l.written += int64(len(segmentMagic))
	return nil
}

// append writes r (stamping its LSN) and returns the log position after it.
// On failure nothing of r stays in the log and the error wraps ErrLogWrite.
func (l *appendLog) append(r *record) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return 0, l.failed
	}
	if l.torn {
		if err := l.f.Truncate(l.written - l.segStart); err != nil {
			return 0, fmt.Errorf("%w: cutting off a partly written record: %w", ErrLogWrite, err)
		}
		l.torn = false
	}
	if err := l.writeMagic(); err != nil {
		return 0, err
	}
	r.lsn = l.nextLSN
	l.buf = r.appendFrame(l.buf[:0])
	if n, err := l.f.Write(l.buf); err != nil {
		if n > 0 {
			// A partly written record would hide every later one from
			// replay: cut it off now, or before the next record.
			l.torn = l.f.Truncate(l.written-l.segStart) != nil
		}
		return 0, fmt.Errorf("%w: %w", ErrLogWrite, err)
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
		// After a failed fsync the kernel may have dropped the dirty pages,
		// and a later fsync can succeed without writing them: nothing
		// since the last good fsync is known to be on disk. Refuse records
		// until a snapshot holds everything in memory.
		l.mu.Lock()
		if l.failed == nil {
			l.failed = fmt.Errorf("%w: fsync failed, writes refused until a snapshot succeeds: %w", ErrLogWrite, err)
			l.failSeg = l.seg
			l.recoverCh = make(chan struct{})
		}
		failed = l.failed
		l.mu.Unlock()
		return failed
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

// failure returns the error that makes the log refuse records, or nil.
func (l *appendLog) failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// recovered clears a failed fsync once a snapshot starting at segment seg
// is durable: the snapshot holds every record of the earlier segments.
func (l *appendLog) recovered(seg uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil && l.failSeg < seg && l.recoverCh != nil {
		l.failed = nil
		close(l.recoverCh)
		l.recoverCh = nil
	}
}

// recovery returns a channel closed once a snapshot recovers from the
// failed fsync, or nil when the log failed for good (closed).
func (l *appendLog) recovery() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.failed == nil:
		done := make(chan struct{})
		close(done)
		return done
	case l.recoverCh == nil:
		return nil
	}
	return l.recoverCh
}

// rotate fsyncs and closes the current segment, starts the next one and
// returns its number and the next LSN. After a failed fsync it starts the
// next segment without syncing the old one, for the snapshot that recovers
// from the failure.
func (l *appendLog) rotate() (uint64, uint64, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == nil {
		if err := l.f.Sync(); err != nil {
			return 0, 0, fmt.Errorf("%w: %w", ErrLogWrite, err)
		}
		l.synced.Store(l.written)
	}
	old, oldTorn, oldMagic := l.f, l.torn, l.needMagic
	if l.torn {
		if old.Truncate(l.written-l.segStart) == nil {
			oldTorn = false
		}
	}
	if oldTorn {
		return 0, 0, fmt.Errorf("%w: a partly written record could not be cut off", ErrLogWrite)
	}
	if err := l.openSegment(l.seg + 1); err != nil {
		l.f, l.torn, l.needMagic = old, oldTorn, oldMagic
		return 0, 0, fmt.Errorf("%w: starting a new segment: %w", ErrLogWrite, err)
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

// close syncs and closes the log. A partly written record left by a failed
// write is cut off first, so the log on disk ends on a whole record.
func (l *appendLog) close() error {
	l.mu.Lock()
	var err error
	if l.torn {
		if err = l.f.Truncate(l.written - l.segStart); err == nil {
			l.torn = false
		}
	}
	l.mu.Unlock()
	if serr := l.sync(); err == nil {
		err = serr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.failed = ErrClosed
	return err
}
