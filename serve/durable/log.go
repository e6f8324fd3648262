package durable

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bloomgate/bloomgate/internal/atomicfile"
)

// Fsync is the log's fsync policy, as Redis' appendfsync.
type Fsync string

const (
	// FsyncAlways fsyncs the log before a write is acknowledged: no
	// acknowledged write is lost, even on power loss. Concurrent writers share
	// an fsync (group commit).
	FsyncAlways Fsync = "always"
	// FsyncEverySec fsyncs the log once a second. Every write reaches the
	// operating system (write(2)) before it is acknowledged, so a crash of the
	// server process loses nothing; a crash of the machine loses at most
	// about the last second.
	FsyncEverySec Fsync = "everysec"
	// FsyncNo never fsyncs the log; the operating system writes it back when
	// it chooses. A crash of the server process loses nothing.
	FsyncNo Fsync = "no"
)

// Check returns an error for a policy other than the three.
func (f Fsync) Check() error {
	switch f {
	case FsyncAlways, FsyncEverySec, FsyncNo:
		return nil
	}
	return fmt.Errorf("serve: fsync policy %q (want always, everysec or no)", f)
}

// File is what the log needs of a segment file.
type File interface {
	io.Writer
	Sync() error
	Truncate(size int64) error
	Close() error
}

// FS creates segment files; tests inject failures (a full disk) through
// it.
type FS interface {
	// Create creates path, which must not exist, for appending.
	Create(path string) (File, error)
}

// OSFS is the operating system's file system.
type OSFS struct{}

// Create creates path, which must not exist, for appending.
func (OSFS) Create(path string) (File, error) {
	return os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND, 0o644)
}

// Log appends records to the current segment of a data directory, which it
// holds locked until Close. Open returns one. It is safe for concurrent
// use; lock order: syncMu, then mu.
type Log struct {
	dir    string
	lock   *os.File
	fs     FS
	policy Fsync

	mu        sync.Mutex
	f         File
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
	closing   chan struct{} // closed by Close: Commit stops waiting

	syncMu sync.Mutex
	synced atomic.Int64
}

// openSegment creates segment seg and makes it durable. When its header
// cannot be written (a full disk), the segment stays empty and the first
// record writes the header before itself: a server starts, and serves reads,
// on a full disk.
func (l *Log) openSegment(seg uint64) error {
	path := filepath.Join(l.dir, segmentName(seg))
	f, err := l.fs.Create(path)
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

// startSegment is openSegment for Open: it creates segment seg and makes
// it durable in the background, so that a server listens without waiting
// for the two fsyncs (tens of milliseconds on a busy disk). It holds mu
// until they are done: every record waits for its segment to be durable,
// as after openSegment. When the directory cannot be synced, records are
// refused (Failure) until a snapshot succeeds, as after a failed fsync.
func (l *Log) startSegment(seg uint64) error {
	f, err := l.fs.Create(filepath.Join(l.dir, segmentName(seg)))
	if err != nil {
		return err
	}
	l.f, l.seg, l.segStart = f, seg, l.written
	l.torn, l.needMagic = false, true
	l.mu.Lock()
	go func() {
		defer l.mu.Unlock() // locked by startSegment: a hand-over
		if err := atomicfile.SyncDir(l.dir); err != nil {
			l.failed = fmt.Errorf("the new log segment is not durable, writes refused until a snapshot succeeds: %w", err)
			l.failSeg = seg
			l.recoverCh = make(chan struct{})
			return
		}
		if l.writeMagic() == nil {
			l.synced.Store(l.written)
		}
	}()
	return nil
}

// writeMagic writes the segment header if it is still missing. Call with mu
// held (or before the log is shared).
func (l *Log) writeMagic() error {
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
		return fmt.Errorf("writing the segment header: %w", err)
	}
	l.needMagic = false
	l.written += int64(len(segmentMagic))
	return nil
}

// Append writes a record whose body body appends to its argument (it must
// not keep it), and returns the record's LSN and the log position after it,
// for Commit. On failure nothing of the record stays in the log; the error
// is the write's (ErrClosed after Close). Call it before applying the
// record's change, and apply nothing when it fails: records are replayed in
// the order Append wrote them.
func (l *Log) Append(body func(dst []byte) []byte) (lsn uint64, pos int64, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed != nil {
		return 0, 0, l.failed
	}
	if l.torn {
		if err := l.f.Truncate(l.written - l.segStart); err != nil {
			return 0, 0, fmt.Errorf("cutting off a partly written record: %w", err)
		}
		l.torn = false
	}
	if err := l.writeMagic(); err != nil {
		return 0, 0, err
	}
	lsn = l.nextLSN
	l.buf = appendFrame(l.buf[:0], lsn, body)
	if n, err := l.f.Write(l.buf); err != nil {
		if n > 0 {
			// A partly written record would hide every later one from
			// replay: cut it off now, or before the next record.
			l.torn = l.f.Truncate(l.written-l.segStart) != nil
		}
		return 0, 0, err
	}
	l.nextLSN++
	l.written += int64(len(l.buf))
	if cap(l.buf) > 1<<20 {
		l.buf = nil
	}
	return lsn, l.written, nil
}

// syncTo returns once the log is fsynced up to position pos. Concurrent
// callers share one fsync.
func (l *Log) syncTo(pos int64) error {
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
			l.failed = fmt.Errorf("fsync failed, writes refused until a snapshot succeeds: %w", err)
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

// Sync fsyncs everything written so far.
func (l *Log) Sync() error {
	l.mu.Lock()
	pos := l.written
	l.mu.Unlock()
	return l.syncTo(pos)
}

// Tick is called once a second: under FsyncEverySec it fsyncs the log.
func (l *Log) Tick() error {
	if l.policy != FsyncEverySec {
		return nil
	}
	return l.Sync()
}

// Commit returns once the record Append wrote up to position pos is as
// durable as the fsync policy requires before its write is acknowledged.
//
// Call it after applying the record's change, without holding the locks
// that other writers need. A failed fsync comes after the write was applied
// and its record written: the change shows at once and may be on disk. An
// error would say nothing changed, so Commit waits instead for the snapshot
// that recovers the log (it holds every applied write) and then returns
// nil; when none comes within hold, or the log closes, it returns the
// fsync's error, and the write's outcome is unknown: a server answers it as
// a crash would, without a reply.
func (l *Log) Commit(pos int64, hold time.Duration) error {
	if l.policy != FsyncAlways {
		return nil
	}
	err := l.syncTo(pos)
	if err == nil {
		return nil
	}
	done := l.recovery()
	if done == nil {
		return err
	}
	t := time.NewTimer(hold)
	defer t.Stop()
	select {
	case <-done:
		return nil
	case <-l.closing:
	case <-t.C:
	}
	return err
}

// Failure returns the error that makes the log refuse records (a failed
// fsync, until a snapshot), or nil.
func (l *Log) Failure() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.failed
}

// recovered clears a failed fsync once a snapshot starting at segment seg
// is durable: the snapshot holds every record of the earlier segments.
func (l *Log) recovered(seg uint64) {
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
func (l *Log) recovery() <-chan struct{} {
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
func (l *Log) rotate() (uint64, uint64, error) {
	l.syncMu.Lock()
	defer l.syncMu.Unlock()
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.failed == nil {
		if err := l.f.Sync(); err != nil {
			return 0, 0, err
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
		return 0, 0, fmt.Errorf("a partly written record could not be cut off")
	}
	if err := l.openSegment(l.seg + 1); err != nil {
		l.f, l.torn, l.needMagic = old, oldTorn, oldMagic
		return 0, 0, fmt.Errorf("starting a new segment: %w", err)
	}
	old.Close()
	return l.seg, l.nextLSN, nil
}

// SizeSinceSnapshot returns the bytes in the current segment: those
// written since the last snapshot.
func (l *Log) SizeSinceSnapshot() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.written - l.segStart
}

// removeBefore deletes the segments older than seg.
func (l *Log) removeBefore(seg uint64) error {
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

// Close syncs and closes the log and releases the data directory. A
// partly written record left by a failed write is cut off first, so the log
// on disk ends on a whole record. Later appends fail with ErrClosed; Close
// is idempotent.
func (l *Log) Close() error {
	l.mu.Lock()
	if l.failed == ErrClosed {
		l.mu.Unlock()
		return nil
	}
	close(l.closing)
	var err error
	if l.torn {
		if err = l.f.Truncate(l.written - l.segStart); err == nil {
			l.torn = false
		}
	}
	l.mu.Unlock()
	if serr := l.Sync(); err == nil {
		err = serr
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if cerr := l.f.Close(); err == nil {
		err = cerr
	}
	l.failed = ErrClosed
	l.lock.Close()
	return err
}

// Abandon closes the log's files and releases the data directory as a
// crash would leave them: no sync, no truncation of a partly written
// record, no snapshot. It is for tests of recovery; the Log must not be
// used after it.
func (l *Log) Abandon() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.f.Close()
	l.lock.Close()
	l.failed = ErrClosed
}
