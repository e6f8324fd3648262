package changefeed

import (
	"context"
	"errors"
	"io"
	"time"
)

// The interfaces sources, feeds and snapshot stores implement. They live
// here, beside the vocabulary they speak, so that an implementation
// (source/postgres, fanout) and a consumer (the bloomgate gate, which
// aliases them as bloomgate.Source, bloomgate.Feed, …) need not import each
// other. docs/design.md describes how a gate uses them.

// Source streams the keys of the table a gate guards. source/postgres and
// source/sqlite implement it.
type Source interface {
	// Scan calls fn once for every key, in any order. The slice is valid
	// only during the call. Scan stops and returns fn's error, or ctx's
	// error when ctx is done. A Scan that returns nil has delivered every key
	// that was committed when it started.
	Scan(ctx context.Context, fn func(key []byte) error) error
	// Estimate returns the approximate number of keys, or 0 if unknown. It
	// sizes the filter and scales the progress report.
	Estimate(ctx context.Context) (int64, error)
}

// A PartitionedSource is a Source that can also stream its keys as several
// parts at once (source/postgres: block ranges of the table under one
// snapshot, one COPY each). A build then normalises and hashes the keys on
// the parts' goroutines, so on every core, and fills the filter from one.
type PartitionedSource interface {
	Source
	// Parts returns how many parts ScanParts streams at once (at least 1).
	Parts() int
	// ScanParts calls fn(part, key) for every key, as Scan would deliver
	// them: from up to Parts() goroutines at once, one call at a time per
	// part, part in [0, Parts()). The slice is valid only during the call.
	// It stops and returns fn's first error, or ctx's error when ctx is
	// done. A ScanParts that returns nil has delivered every key that was
	// committed when it started, across its parts.
	ScanParts(ctx context.Context, fn func(part int, key []byte) error) error
}

// Feed is a change feed with exact positions, such as PostgreSQL logical
// replication (source/postgres.Feed). Rebuild and Confirm may run while
// Stream does; no two Streams run at once.
//
// Optional capabilities, found by type assertion: Estimate(ctx) (int64,
// error) sizes the first filter (else the gate's Source's estimate, if set),
// Err() error reports the error of the feed's last failed connection while
// Stream retries on its own (it then appears in the gate's State reason),
// and SnapshotOnly() bool, when true, says the feed's filters come only from
// snapshots (a fan-out instance: its Rebuild always fails), so the gate never
// starts a rebuild of its own; such a feed implements Generations,
// so that the gate swaps each newer filter in beside the stream, or else
// ends its Stream when a newer filter is there to load. A Feed whose head was
// read by another process implements RelayedHead.
type Feed interface {
	// Bootstrap starts the feed afresh: it calls fn for every key of the
	// table at one consistent point and returns that point. Stream from it
	// delivers exactly the transactions the keys do not reflect.
	Bootstrap(ctx context.Context, fn func(key []byte) error) (Position, error)
	// Rebuild is Bootstrap while a Stream goes on: the keys reflect exactly
	// the transactions with Txn.Commit below the returned point.
	Rebuild(ctx context.Context, fn func(key []byte) error) (Position, error)
	// Stream calls apply, in order, for every committed transaction after
	// from, and with progress markers (Txns without changes). An error
	// wrapping ErrRebuild means from cannot be resumed.
	Stream(ctx context.Context, from Position, apply func(Txn) error) error
	// Head returns the position of the newest committed transaction now.
	Head(ctx context.Context) (Position, error)
	// Confirm tells the feed that every transaction up to pos is durable
	// on the consumer's side, so it may release them.
	Confirm(ctx context.Context, pos Position) error
}

// RelayedHead is implemented by a Feed whose head was read from the
// database by another process and relayed, such as a fan-out instance's
// (the feeder's heartbeat). A following gate then uses HeadAge instead of
// Head: it returns a position the database had reached and an age — every
// transaction committed more than age before HeadAge returned ends at or
// before head — so that freshness is measured from the moment of the read,
// not of the relay. An error (no such read yet, or a stale one) turns the
// gate not ready once its MaxLag has passed since the last head it had.
type RelayedHead interface {
	HeadAge(ctx context.Context) (head Position, age time.Duration, err error)
}

// Generations is implemented by a snapshot-only Feed whose filters are
// built elsewhere and published as generations while it streams, such as a
// fan-out instance (the feeder's rebuilds). A following gate then swaps
// each newer generation in beside the running stream, with no moment of
// failing open: the serving filter keeps answering and following while the
// newer one is loaded (LoadNewer) and caught up (CatchUp) to the serving filter's
// position; at that position readers switch with one atomic store, and
// Swapped tells the feed. A swap that cannot complete (a hash seed that
// differs, a filter that refuses a key, a catch-up that fails) ends the
// Stream, and the gate loads the newest snapshot as at a start.
type Generations interface {
	// Newer receives when a newer generation than the one served is
	// published.
	Newer() <-chan struct{}
	// LoadNewer calls try with the newest generation's snapshot, if it is
	// newer than the one served, and returns its generation (0, and try not
	// called: none newer).
	LoadNewer(ctx context.Context, try func(r io.Reader) error) (gen uint64, err error)
	// CatchUp calls apply, in order, for every transaction after from, the
	// position of the snapshot LoadNewer loaded last, while Stream goes on,
	// until ctx is done or apply fails (CatchUp returns apply's error).
	CatchUp(ctx context.Context, from Position, apply func(Txn) error) error
	// Swapped says that the generation LoadNewer loaded serves from pos on.
	Swapped(pos Position, gen uint64)
}

// ErrNoSnapshot reports a SnapshotStore with no usable snapshot.
var ErrNoSnapshot = errors.New("bloomgate: no usable snapshot")

// SnapshotStore keeps a gate's snapshots: a filter and the change-feed
// position it reflects.
type SnapshotStore interface {
	// Save stores a snapshot taken at pos, written by write. Once it
	// returns nil the snapshot survives a crash.
	Save(ctx context.Context, pos Position, write func(io.Writer) error) error
	// Load calls try with the stored snapshots, newest first, until try
	// returns nil, and returns nil then. It returns ErrNoSnapshot, joined
	// with try's errors, when none is left.
	Load(ctx context.Context, try func(r io.Reader) error) error
}

// ErrClosed reports use of a closed gate (bloomgate.ErrClosed is the same
// error): a Follower that returns it has stopped for good.
var ErrClosed = errors.New("bloomgate: closed")

// Follower keeps a filter in step with a change feed: a gate as a fan-out
// feeder drives it (bloomgate.Gate.Follower implements it; the feeder,
// fanout.FeederConfig.Gate, gives it the feed that publishes every
// transaction and the store its snapshots go to).
type Follower interface {
	// Follow applies feed until ctx is done, saving the filter's
	// snapshots to snapshots and starting from the newest of them. It
	// returns ctx's error, an error wrapping ErrClosed once the follower
	// is closed, or another error when it can go on no longer (the feeder
	// then gives up its lease and competes for it again).
	Follow(ctx context.Context, feed Feed, snapshots SnapshotStore) error
	// Builds counts the filters built so far (bootstraps and rebuilds):
	// each is a new generation of the filter.
	Builds() uint64
}
