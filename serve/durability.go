package serve

import (
	"errors"
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
)

// The keyspace is durable through package durable: a log record is written
// before its write is applied in memory, under the key's mutex, and a
// write whose record could not be written changes nothing and fails with
// ErrLogWrite. What a record means (its op and arguments, record.go) and
// how a snapshot's entries become keys (snapshot.go) are this package's;
// framing, checksums, LSNs, segments, snapshots files, recovery and the
// check are durable's.

// ErrLogWrite reports a write refused because its log record could not be
// written or synced: it was not applied and is not acknowledged. The text
// is Redis' reply to a failed AOF write; the cause follows it.
var ErrLogWrite = &Error{Code: CodeLogWrite, Msg: "errors writing to the log"}

// Fsync is the log's fsync policy, as Redis' appendfsync (durable.Fsync).
type Fsync = durable.Fsync

// The fsync policies (see durable.FsyncAlways, FsyncEverySec, FsyncNo).
const (
	FsyncAlways   = durable.FsyncAlways
	FsyncEverySec = durable.FsyncEverySec
	FsyncNo       = durable.FsyncNo
)

// The errors of recovery and the check are package durable's; these are
// the same values, for code that matches them by serve's names.
var (
	// ErrDataDirLocked reports a DataDir that another process (or Store)
	// holds.
	ErrDataDirLocked = durable.ErrLocked
	// ErrCorruptSnapshot reports a snapshot that is truncated, malformed or
	// fails its checksum (see Open).
	ErrCorruptSnapshot = durable.ErrCorruptSnapshot
	// ErrLogDamaged reports a log record that is damaged before the end of
	// the log. Errors wrapping it are *LogDamageError.
	ErrLogDamaged = durable.ErrLogDamaged
)

// LogDamageError describes damage found in a log segment.
type LogDamageError = durable.LogDamageError

// CheckReport is what Check found in a data directory, and what a repair
// did or would do.
type CheckReport = durable.CheckReport

// SnapshotCheck is the state of one snapshot file.
type SnapshotCheck = durable.SnapshotCheck

// SegmentCheck is the state of one log segment.
type SegmentCheck = durable.SegmentCheck

// durableHold bounds how long a write whose fsync failed waits for the
// snapshot that makes it durable (durable.Log.Commit; the background tries
// a snapshot every second). A variable for tests.
var durableHold = 10 * time.Second

// logOptions are the durable options of cfg.
func logOptions(cfg *Config) durable.Options {
	return durable.Options{
		MaxRecord: cfg.MaxFilterBytes + 1<<20,
		MaxEntry:  cfg.MaxFilterBytes + 1<<16,
		Fsync:     cfg.Fsync,
		Logger:    cfg.Logger,
		FS:        cfg.fs,
	}
}

// logError is the error of a write refused because the log failed.
func logError(err error) error {
	if errors.Is(err, durable.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("%w: %w", ErrLogWrite, err)
}

// logRecord appends r to the log (when there is one), stamps its LSN and
// returns the log position to wait for. Call it before applying r, with the
// object's mutex held so that log order is apply order; on error apply
// nothing.
func (s *Store) logRecord(r *record) (int64, error) {
	s.dirty.Add(1)
	if s.aof == nil {
		return 0, nil
	}
	lsn, pos, err := s.aof.Append(r.appendBody)
	if err != nil {
		return 0, logError(err)
	}
	r.lsn = lsn
	return pos, nil
}

// waitDurable waits until the log position pos is as durable as the fsync
// policy requires before a write is acknowledged (durable.Log.Commit). When
// that fails the write was applied and may be on disk: an error reply would
// say nothing changed, so the error is ErrOutcomeUnknown, which the
// protocols answer by closing the connection without a reply, as a crash
// would.
func (s *Store) waitDurable(pos int64) error {
	if s.aof == nil {
		return nil
	}
	if err := s.aof.Commit(pos, durableHold); err != nil {
		return fmt.Errorf("%w: %w", ErrOutcomeUnknown, logError(err))
	}
	return nil
}

// replayer loads a snapshot's keys and replays log records into a Store
// being opened.
type replayer struct{ s *Store }

func (rp replayer) LoadSnapshot(r *durable.SnapshotReader) error {
	s := rp.s
	objs, err := loadEntries(r, s.cfg.MaxFilterBytes, s.cfg.Now)
	if err != nil {
		return err
	}
	for _, o := range objs {
		s.keys[o.name] = o
		s.used.Add(o.bytes)
	}
	s.snapLSN = r.NextLSN()
	return nil
}

func (rp replayer) Record(lsn uint64, body []byte) error {
	r, err := decodeBody(lsn, body)
	if err != nil {
		return err // wraps durable.ErrMalformed: damage to the log
	}
	if err := rp.s.apply(r); err != nil {
		return replayError{err}
	}
	return nil
}

// replayError is a record that decoded but could not be applied: it stops
// the start, and is not damage to the log (Check, which only decodes, would
// not find it), so it does not unwrap to durable.ErrMalformed.
type replayError struct{ err error }

func (e replayError) Error() string { return e.err.Error() }

// checker decodes what Check reads, and keeps nothing.
type checker struct{ maxFilterBytes int64 }

func (c checker) LoadSnapshot(r *durable.SnapshotReader) error {
	_, err := loadEntries(r, c.maxFilterBytes, time.Now)
	return err
}

func (checker) Record(lsn uint64, body []byte) error {
	_, err := decodeBody(lsn, body)
	return err
}

// Check examines the snapshots and log segments in dir, which must not be
// in use (ErrDataDirLocked otherwise), and with repair makes it startable
// (see durable.Check). maxFilterBytes bounds a record as
// Config.MaxFilterBytes does (0: its default).
func Check(dir string, repair bool, maxFilterBytes int64) (*CheckReport, error) {
	cfg := Config{MaxFilterBytes: maxFilterBytes}
	if err := fillDefaults(&cfg); err != nil {
		return nil, err
	}
	return durable.Check(dir, repair, logOptions(&cfg), checker{cfg.MaxFilterBytes})
}
