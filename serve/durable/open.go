package durable

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
)

// Options configures Open. MaxRecord and MaxEntry have no default: they
// bound what the caller's records and entries can be.
type Options struct {
	// MaxRecord bounds a log record's payload: a longer one is damage.
	MaxRecord int64
	// MaxEntry bounds a snapshot entry: a longer one is corruption.
	MaxEntry int64
	// Fsync is the log's fsync policy. Default: FsyncEverySec.
	Fsync Fsync
	// Logger receives warnings (a truncated log tail, a damaged snapshot
	// passed over). Default: discard.
	Logger *slog.Logger
	// FS creates log segments. Default: OSFS.
	FS FS
}

func (o *Options) fill() error {
	if o.Fsync == "" {
		o.Fsync = FsyncEverySec
	}
	if err := o.Fsync.Check(); err != nil {
		return err
	}
	if o.MaxRecord <= 0 || o.MaxEntry <= 0 {
		return fmt.Errorf("durable: MaxRecord and MaxEntry must be positive")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if o.FS == nil {
		o.FS = OSFS{}
	}
	return nil
}

// Replayer receives what Open reads back: the newest snapshot that reads
// whole, then every log record after it.
type Replayer interface {
	// LoadSnapshot reads a snapshot's entries to their end. When it fails
	// (or the snapshot turns out damaged), Open may call it again with an
	// older snapshot: it must keep nothing of a failed call.
	LoadSnapshot(r *SnapshotReader) error
	// Record applies one log record (see RecordFunc). Records the snapshot
	// holds already come too (their LSN is below its NextLSN): the Replayer
	// skips them.
	Record(lsn uint64, body []byte) error
}

// Open locks dir (creating it; ErrLocked if another Log holds it), loads
// the newest snapshot that reads back whole and replays the log from it
// through rp, then starts a new segment to append to.
//
// A damaged snapshot is passed over for the one before it (the log since
// that one is kept, so nothing is lost); when there is nothing to fall back
// on, Open stops with an error wrapping ErrCorruptSnapshot. A record cut
// short at the very end of the log (a crash while it was written) is
// truncated with a logged warning; any other damage to the log stops Open
// with a *LogDamageError (wrapping ErrLogDamaged) naming the file and
// offset.
func Open(dir string, opts Options, rp Replayer) (*Log, error) {
	if err := opts.fill(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	l, err := recoverDir(dir, opts, rp)
	if err != nil {
		lock.Close()
		return nil, err
	}
	l.lock = lock
	return l, nil
}

// recoverDir loads the newest good snapshot, replays the log from it and
// opens a new segment.
func recoverDir(dir string, opts Options, rp Replayer) (*Log, error) {
	segs, err := listSegments(dir)
	if err != nil {
		return nil, err
	}
	from, nextLSN, err := loadSnapshot(dir, opts, segs, rp)
	if err != nil {
		return nil, err
	}
	var replay []uint64
	for _, seg := range segs {
		if seg >= from {
			replay = append(replay, seg)
		}
	}
	for i, seg := range replay {
		last, err := replaySegment(dir, seg, opts, i == len(replay)-1, len(replay)-1-i, rp.Record)
		if err != nil {
			return nil, err
		}
		nextLSN = max(nextLSN, last+1)
	}
	next := uint64(1)
	if len(segs) > 0 {
		next = segs[len(segs)-1] + 1
	}
	l := &Log{dir: dir, fs: opts.FS, policy: opts.Fsync, nextLSN: nextLSN, closing: make(chan struct{})}
	if err := l.startSegment(next); err != nil {
		return nil, err
	}
	return l, nil
}

// loadSnapshot loads the newest snapshot that reads back whole and returns
// the first segment to replay and the snapshot's next LSN. A damaged
// snapshot is skipped for the one before it (and renamed with
// damagedSuffix) only when the log reaches back to that one; with none left,
// the log alone is replayed only when it reaches back to its first segment.
func loadSnapshot(dir string, opts Options, segs []uint64, rp Replayer) (from, nextLSN uint64, err error) {
	gens, err := snapshotGens(dir)
	if err != nil {
		return 0, 0, err
	}
	oldest := uint64(1)
	if len(segs) > 0 {
		oldest = segs[0]
	}
	var damaged []string
	var firstErr error
	for _, g := range gens {
		path := filepath.Join(dir, g.name)
		var next uint64
		keys, err := readSnapshotFile(path, opts.MaxEntry, func(r *SnapshotReader) error {
			next = r.NextLSN()
			return rp.LoadSnapshot(r)
		})
		if err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("%s: %w", path, err)
			}
			opts.Logger.Error("snapshot is damaged; trying the one before it", "path", path, "err", err)
			damaged = append(damaged, g.name)
			continue
		}
		if len(damaged) > 0 && g.seg < oldest {
			return 0, 0, noFallback(firstErr)
		}
		markDamaged(dir, damaged, opts.Logger)
		opts.Logger.Info("snapshot loaded", "keys", keys, "path", path)
		if len(damaged) > 0 {
			opts.Logger.Warn("started from an older snapshot and the log since it; nothing is lost", "path", path, "damaged", damaged)
		}
		return g.seg, next, nil
	}
	if len(damaged) > 0 {
		if oldest != 1 {
			return 0, 0, noFallback(firstErr)
		}
		markDamaged(dir, damaged, opts.Logger)
		opts.Logger.Warn("every snapshot is damaged; replaying the whole log, which reaches back to the first write", "damaged", damaged)
	}
	return 0, 1, nil
}

func noFallback(err error) error {
	return fmt.Errorf("%w; the log does not reach back far enough to start without it: restore the data directory from a backup, "+
		"or run `bloomgate serve check -data DIR` to see what starting without it would lose and `bloomgate serve check -repair -data DIR` to do so (the snapshot is kept)", err)
}

// markDamaged renames damaged snapshots out of the way once a start has
// fallen back past them.
func markDamaged(dir string, names []string, log *slog.Logger) {
	for _, name := range names {
		path := filepath.Join(dir, name)
		if err := os.Rename(path, path+damagedSuffix); err != nil {
			log.Error("cannot rename a damaged snapshot", "path", path, "err", err)
		}
	}
}

// replaySegment reads a log segment through fn and returns the last LSN in
// it. A torn record at the end of the last segment is truncated with a
// warning; any other damage stops the start with a *LogDamageError.
func replaySegment(dir string, seg uint64, opts Options, last bool, after int, fn RecordFunc) (uint64, error) {
	path := filepath.Join(dir, segmentName(seg))
	f, size, err := openSized(path, os.O_RDWR)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc, err := readSegment(f, size, opts.MaxRecord, fn)
	if err != nil {
		return 0, fmt.Errorf("serve: replaying %s: %w", path, err)
	}
	switch {
	case sc.end == endTorn && last:
		opts.Logger.Warn("the log ends with an incomplete record, cut short while it was written; truncating it",
			"path", path, "offset", sc.good, "dropped_bytes", size-sc.good, "why", sc.reason)
		if err := f.Truncate(sc.good); err != nil {
			return 0, err
		}
		if err := f.Sync(); err != nil {
			return 0, err
		}
	case sc.end != endClean:
		return 0, &LogDamageError{Path: path, Offset: sc.good, Size: size, Reason: sc.reason, LastGood: sc.lastLSN, NextFiles: after}
	}
	return sc.lastLSN, nil
}
