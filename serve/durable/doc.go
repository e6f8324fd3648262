// Package durable keeps a keyspace on disk: an append-only log of records
// in numbered segment files, snapshots written atomically, the recovery
// that loads the newest good snapshot and replays the log after it, and the
// offline check and repair of a data directory. It frames, checksums,
// numbers and orders records and snapshot entries; what they mean is its
// caller's (package serve: the key kinds and their payloads). It knows no
// key, kind or protocol.
//
// The shape follows pebble's record package (a record is an opaque payload
// with a length and checksums; damage is told apart from a record cut short
// by a crash) and etcd's wal (segments cut at each snapshot, Open reads back
// everything since the snapshot before appending).
//
// # Files
//
// A data directory holds log segments log-<n>.aof, snapshots
// snapshot-<n>.bgs and a LOCK file. Every log record carries a log sequence
// number (LSN), assigned by Append in the order records are written.
//
// Log segment, little-endian: the 8 bytes "BGLOG002", then records one
// after another, each framed as
//
//	u64 payload length | u32 CRC-32C of the payload | u32 CRC-32C of the 12 bytes before it | payload
//
// and the payload is
//
//	u64 LSN | body (the caller's)
//
// The header's own checksum tells a damaged length from a record cut short:
// a record is torn (cut short by a crash while it was being written) only
// when its header is whole and intact and the file ends before its payload
// does, or when fewer bytes than a header remain, or when everything from the
// record's start to the end of the file is zero bytes (a file system that
// extended the file before the crash but never wrote the data). Only such a
// tail, at the end of the last segment, is truncated at start; any other bad
// record is damage, and the start stops (see LogDamageError). A body the
// caller cannot decode (its callback returns an error wrapping ErrMalformed)
// is damage too.
//
// Segments written before the header existed ("legacy", no magic) frame
// records as u64 length | u32 CRC-32C of the payload | payload; there a
// length past the end of the file cannot be told from damage and is taken
// for a torn tail.
//
// Snapshot snapshot-<seg>.bgs, where seg is the first log segment the
// snapshot does not cover, little-endian:
//
//	"BGSNAP01" | u64 next LSN
//	per entry:  u8 1 | u64 entry length | entry (the caller's)
//	end:        u8 0 | u32 CRC-32C of every byte before it
//
// Entry tags other than 1 are reserved for new kinds of entry; a reader that
// meets one it does not know reports the snapshot as corrupt.
//
// Two generations are kept: the newest snapshot and the one before it, with
// every log segment from the older one's on. If the newest is damaged, Open
// falls back to the older one and replays the log from there, and nothing is
// lost. While there is only one snapshot, the log is kept from its first
// segment, which is the fallback. A file named snapshot.bgs (written before
// generations existed) is read as the oldest generation.
//
// # Guarantees
//
// A record is written before its write is applied (the caller applies it
// only when Append succeeded), so a write whose record could not be written
// changes nothing. A partly written record is cut off again at once
// (truncate needs no free space), so on a full disk the next record
// succeeds as soon as there is room, without a restart. After a failed
// fsync nothing since the last good one is known to be on disk: records are
// refused until a snapshot holds everything (see Log.Commit).
//
// A Log is safe for concurrent use. Lock order: Log.syncMu, then Log.mu.
package durable

import (
	"errors"
	"fmt"
)

// The texts of the errors Open returns keep the prefix "serve:": they are
// what serve.Open returns, and docs/operations.md quotes them.
var (
	// ErrLocked reports a data directory that another process (or Log)
	// holds.
	ErrLocked = errors.New("serve: data directory locked")
	// ErrLogDamaged reports a log record that is damaged before the end of
	// the log. Errors wrapping it are *LogDamageError.
	ErrLogDamaged = errors.New("serve: log is damaged")
	// ErrCorruptSnapshot reports a snapshot that is truncated, malformed or
	// fails its checksum. Open then falls back to the previous snapshot and
	// the log; when there is nothing to fall back on it stops rather than
	// load less than was acknowledged.
	ErrCorruptSnapshot = errors.New("serve: snapshot is corrupt")
	// ErrMalformed is what a Replayer's errors wrap for a record or entry
	// it cannot decode: the record counts as damage.
	ErrMalformed = errors.New("malformed record")
	// ErrClosed reports a record appended after Close.
	ErrClosed = errors.New("durable: log closed")
)

// LogDamageError describes damage found in a log segment.
type LogDamageError struct {
	Path      string // the segment file
	Offset    int64  // where the first bad record starts
	Size      int64  // the segment's size
	Reason    string // what is wrong with the record
	LastGood  uint64 // LSN of the last good record before it (0: none)
	NextFiles int    // segments after this one
}

func (e *LogDamageError) Error() string {
	return fmt.Sprintf("serve: %s is damaged at offset %d of %d (%s), with %d bytes and %d later segment files after it; "+
		"the start is stopped so that they are not dropped: run `bloomgate serve check -data DIR` to see what a repair would lose, "+
		"then `bloomgate serve check -repair -data DIR` (it keeps a copy of every file it changes), or restore the data directory from a backup",
		e.Path, e.Offset, e.Size, e.Reason, e.Size-e.Offset, e.NextFiles)
}

func (e *LogDamageError) Unwrap() error { return ErrLogDamaged }
