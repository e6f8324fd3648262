package fanout

import (
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"log/slog"
	"time"
)

// Cursor names an entry of a Log: a stream sequence, an entry ID. The zero
// Cursor is the point before a log's first entry.
type Cursor string

// Entry is one entry of a Log.
type Entry struct {
	Cursor Cursor
	Data   []byte
}

// Errors an adapter returns (wrapped) to the engine.
var (
	// ErrFenced reports an Append refused because the log's last entry is
	// not the one the feeder appended after: another writer appended.
	ErrFenced = errors.New("fanout: the log moved on (fenced)")
	// ErrHeld reports a lease another feeder holds.
	ErrHeld = errors.New("fanout: lease held by another feeder")
	// ErrLost reports a lease that is no longer the caller's.
	ErrLost = errors.New("fanout: lease lost")
	// ErrNotFound reports a Store key or object that does not exist.
	ErrNotFound = errors.New("fanout: not found")
	// ErrConflict reports a Store.CompareAndPut whose revision is not the
	// key's.
	ErrConflict = errors.New("fanout: revision conflict")
)

// Log is a set's ordered, replicated log. Its entries are opaque bytes;
// the engine decodes and checks them. Adapters retry transient failures
// inside Read; Append and Last report them.
type Log interface {
	// Append adds data as the entry right after the entry at after (the
	// zero Cursor: the log has had no entry) and returns its cursor. When
	// the log's last entry is another, it appends nothing and returns an
	// error wrapping ErrFenced, except when that entry is data itself,
	// appended right after after by an earlier attempt: then it returns
	// that entry's cursor.
	Append(ctx context.Context, after Cursor, data []byte) (Cursor, error)
	// Last returns the log's last entry (Data nil when it holds none) and
	// the cursor to append after: the last entry's, unless entries after it
	// were deleted (a log that lost its tail).
	Last(ctx context.Context) (last Entry, tail Cursor, err error)
	// Read calls fn with every entry after after, in order, waiting for
	// new ones, until ctx is done or fn returns an error (Read returns
	// it). An entry missing between two (trimmed or deleted), where the log
	// can tell, is an error wrapping ErrGap.
	Read(ctx context.Context, after Cursor, fn func(Entry) error) error
}

// AsyncAppender is a Log that can have several appends in flight: the
// cursor an entry gets is known before the log acknowledges it, so the
// feeder sends a batch without waiting for the one before it. The feeder
// uses it when the Log implements it.
type AsyncAppender interface {
	// AppendAsync sends data as the entry right after the entry at after
	// (which may itself be in flight) and returns the cursor it gets
	// there. done receives nil once the log holds data at that cursor,
	// or an error: the log may hold it or not (Append, which recognises
	// an earlier attempt, settles which). An entry sent after it is held
	// only if an entry is held at that cursor: this one, or another
	// writer's (Append then reports ErrFenced, and the batches' Prev
	// tells instances that this one is missing). ctx bounds the wait for
	// the log's answer (done then receives an error).
	AppendAsync(ctx context.Context, after Cursor, data []byte) (cur Cursor, done <-chan error, err error)
}

// Lease picks the one feeder of a set. A Lease value serves one feeder,
// one call at a time (the engine serialises its calls).
type Lease interface {
	// Acquire takes the lease for holder if no one holds it, for the
	// adapter's lease TTL, and returns its term: larger than every term
	// before it. It returns an error wrapping ErrHeld while another holds
	// it.
	Acquire(ctx context.Context, holder string) (term uint64, err error)
	// Renew extends the lease Acquire took. An error wrapping ErrLost
	// means another holder took it or it expired.
	Renew(ctx context.Context) error
	// Release gives the lease up if it is still held.
	Release(ctx context.Context) error
}

// Store keeps a set's small values (the heartbeat, the snapshot records)
// and its snapshot objects.
type Store interface {
	// Get returns key's value and revision, or an error wrapping
	// ErrNotFound. It shows every Put that completed before it began (an
	// instance bounds the heartbeat's freshness on that): not a replica's
	// read that may lag.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Put writes key's value.
	Put(ctx context.Context, key string, val []byte) error
	// CompareAndPut writes key's value only if key's revision is rev (0:
	// only if key does not exist), and returns the new revision; an error
	// wrapping ErrConflict otherwise.
	CompareAndPut(ctx context.Context, key string, val []byte, rev uint64) (uint64, error)
	// PutObject stores the object name from r.
	PutObject(ctx context.Context, name string, r io.Reader) error
	// GetObject opens the object name and returns its size (0: unknown),
	// or an error wrapping ErrNotFound.
	GetObject(ctx context.Context, name string) (io.ReadCloser, int64, error)
	// Objects lists the objects' names.
	Objects(ctx context.Context) ([]string, error)
	// DeleteObject removes the object name.
	DeleteObject(ctx context.Context, name string) error
}

// CheckedObject is implemented by a Store's GetObject reader that checks
// the object's bytes against a SHA-256 of its own when read to the end
// (returning an error instead of io.EOF on a mismatch). An instance's load
// then relies on that check where the sum is its snapshot record's,
// instead of hashing the bytes a second time.
type CheckedObject interface {
	// SHA256 returns the sum checked, if known.
	SHA256() (sum [sha256.Size]byte, ok bool)
}

// Backend is what an adapter gives the engine for one set.
type Backend struct {
	// Name names the set in logs.
	Name string
	// Log is the set's log. Required.
	Log Log
	// Store holds the heartbeat, the snapshot records and snapshots.
	// Required.
	Store Store
	// NewLease returns a Lease for one feeder. Required by NewFeeder.
	NewLease func() Lease
	// LeaseTTL is the lease's lifetime without renewal. Required by
	// NewFeeder.
	LeaseTTL time.Duration
	// Key, if set, authenticates every batch, heartbeat and snapshot
	// record with HMAC-SHA256: the feeder signs, instances refuse what is
	// not signed with it. Every process of the set needs the same Key.
	// Default: nil, nothing authenticated (the server's permissions must
	// keep others from writing).
	Key []byte
	// Logger receives lease changes and failures. Default: discard.
	Logger *slog.Logger
}

// Store keys.
const (
	keyHead       = "head"
	keySnapshot   = "snapshot"
	keySnapPrev   = "snapshot.prev"
	minKeyLen     = 16
	headWaitStart = time.Millisecond
)

func (b *Backend) check(lease bool) error {
	switch {
	case b.Log == nil || b.Store == nil:
		return errors.New("fanout: Backend needs a Log and a Store")
	case lease && (b.NewLease == nil || b.LeaseTTL <= 0):
		return errors.New("fanout: Backend needs NewLease and a positive LeaseTTL for a feeder")
	case len(b.Key) > 0 && len(b.Key) < minKeyLen:
		return errors.New("fanout: Key must be at least 16 bytes")
	}
	if b.Logger == nil {
		b.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// ValidSet reports whether s can name a set in every adapter's keys and
// subjects: 1 to 64 of A-Z a-z 0-9 _ -.
func ValidSet(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}
