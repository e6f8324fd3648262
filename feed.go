package bloomgate

import (
	"context"
	"errors"
)

// ErrResync reports a change feed that cannot continue from the position the
// gate asked for (a PostgreSQL slot that was dropped, invalidated, or has
// moved past it; a trimmed stream; a gap in sequence numbers). The gate fails
// open and builds afresh from a new snapshot of the feed.
var ErrResync = errors.New("bloomgate: change feed cannot resume from this position")

// Txn is one committed transaction's changes to the key set, as a change feed
// delivers it.
type Txn struct {
	// Pos is the transaction's place in the source's commit order
	// (PostgreSQL: the end LSN of its commit record). Positions strictly
	// increase from one Txn to the next.
	Pos uint64
	// Adds are the keys of rows the transaction inserted, or updated to.
	Adds [][]byte
	// Removes are the keys of rows it deleted, or updated away from. The
	// gate applies a transaction's adds before its removes, so a key that
	// is deleted and inserted again in one transaction is never absent.
	Removes [][]byte
	// UnknownRemoves counts deleted rows whose key the feed could not see
	// (a replica identity without the key column). Their keys stay in the
	// filter as false positives and count toward the rebuild trigger.
	UnknownRemoves int
}

// Feed is a source of committed changes with exact positions, such as
// PostgreSQL logical replication (source/postgres) or a fan-out stream. The
// gate follows one with Gate.Follow. Snapshot and Stream may run at the same
// time (a rebuild takes a fresh snapshot while the stream goes on).
type Feed interface {
	// Snapshot reads the table at one consistent point. It calls start
	// with that point's position before the first key, then fn for every
	// key committed at it. The snapshot holds exactly the transactions with
	// Pos ≤ the position: the stream delivers all the others.
	Snapshot(ctx context.Context, start func(pos uint64), fn func(key []byte) error) error
	// Stream calls apply for every committed transaction with Pos > from,
	// in order, until ctx is done or it fails. It may also call apply with
	// a Txn without changes, to report that every transaction before its
	// Pos has been delivered. An error wrapping ErrResync means from can no
	// longer be resumed.
	Stream(ctx context.Context, from uint64, apply func(Txn) error) error
	// Head returns the position of the newest committed transaction now:
	// a gate starting from a snapshot is caught up, and ready, once the
	// stream has reported a position at or past it.
	Head(ctx context.Context) (uint64, error)
	// Confirm tells the feed that every transaction up to pos is durable
	// in a gate snapshot, so it may release them.
	Confirm(ctx context.Context, pos uint64) error
}
