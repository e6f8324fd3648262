package jetstream

import (
	"context"
	"errors"
	"fmt"

	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/internal/defaults"
)

// Instance errors.
var (
	// ErrSnapshotOnly is returned by an Instance's Bootstrap and Rebuild:
	// instances never scan the database; they start from the feeder's
	// snapshots. Follow then fails open and tries again (with backoff), and
	// starts from the newest snapshot once one is there.
	ErrSnapshotOnly = errors.New("jetstream: instances start only from the feeder's snapshots")
	// ErrStaleHead is returned by Head when the feeder's heartbeat has not
	// changed for InstanceConfig.HeadTimeout: no feeder is publishing.
	ErrStaleHead = errors.New("jetstream: the feeder's heartbeat is stale")
)

// InstanceConfig configures an Instance. The zero value of every field
// means its default.
type InstanceConfig struct {
	// HeadTimeout is how long the feeder's heartbeat may stay unchanged
	// before Head reports ErrStaleHead. Follow then stops seeing the head
	// advance, and the gate fails open once its applied position is more
	// than FollowConfig.MaxLag old: with no feeder, an instance stops
	// answering "absent" within HeadTimeout + MaxLag. Keep it a few
	// FeederConfig.HeartbeatIntervals. Default: 5 s.
	HeadTimeout time.Duration
	// Local, if set, keeps this instance's own snapshots (such as
	// bloomgate.DirSnapshots(dir)): Save writes there, and Load starts from
	// the newest local snapshot when it is at least as new as the feeder's
	// newest, so a restart reads a local file and only the stream's tail.
	// Default: nil, Save returns ErrReadOnly and every start fetches the
	// feeder's snapshot.
	Local bloomgate.SnapshotStore
}

// DefaultHeadTimeout is InstanceConfig.HeadTimeout's default.
const DefaultHeadTimeout = 5 * time.Second

// Instance is the instance side of a set: a bloomgate.Feed over the stream,
// for Gate.Follow with FollowConfig.Snapshots set to Snapshots():
//
//	g.Follow(ctx, inst, bloomgate.FollowConfig{Identity: id, Snapshots: inst.Snapshots()})
//
// Follow loads the newest snapshot the feeder uploaded, then Stream replays
// the stream from the snapshot's sequence. Guarantees:
//
//   - Nothing skipped: Stream checks every message's stream sequence (one
//     more than the last) and that it continues from the position applied
//     (fanout.Continue); a trimmed stream, a lost message or a feeder that
//     bootstrapped afresh is an error wrapping changefeed.ErrRebuild, and
//     Follow fails open and starts again from the newest snapshot.
//   - Bounded staleness: Head is the feeder's heartbeat (the database's
//     newest position), so the gate is ready only once it has applied what
//     was committed before it started, and fails open when it falls more
//     than MaxLag behind, or when the heartbeat stops (see HeadTimeout).
//
// Bootstrap and Rebuild return ErrSnapshotOnly: a filter Follow would
// rebuild (overfilled, truncated table) stays as it is, which costs false
// positives but never a false negative, until the instance starts again
// from a newer snapshot of the feeder, which rebuilds from the database.
// Confirm does nothing. An Instance is safe for concurrent use.
type Instance struct {
	s   *Set
	cfg InstanceConfig

	head fanout.HeadWatch[uint64]
}

var _ bloomgate.Feed = (*Instance)(nil)

// NewInstance returns the instance side of the set.
func (s *Set) NewInstance(cfg InstanceConfig) (*Instance, error) {
	if cfg.HeadTimeout < 0 {
		return nil, fmt.Errorf("%w: negative HeadTimeout", ErrInvalidConfig)
	}
	defaults.Set(&cfg.HeadTimeout, DefaultHeadTimeout)
	return &Instance{s: s, cfg: cfg}, nil
}

// Snapshots returns the store for FollowConfig.Snapshots: Load tries the
// newest local snapshot if it is at least as new as the feeder's newest,
// then the feeder's, newest first, then the older local ones; Save writes
// to InstanceConfig.Local, or returns ErrReadOnly without one (only the
// feeder uploads; Follow logs the error).
func (in *Instance) Snapshots() bloomgate.SnapshotStore {
	return &snapshots{s: in.s, local: in.cfg.Local}
}

// Bootstrap returns ErrSnapshotOnly.
func (in *Instance) Bootstrap(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return 0, ErrSnapshotOnly
}

// Rebuild returns ErrSnapshotOnly.
func (in *Instance) Rebuild(ctx context.Context, fn func(key []byte) error) (changefeed.Position, error) {
	return 0, ErrSnapshotOnly
}

// Stream applies the stream's transactions after from (a snapshot's
// position, or one Stream delivered) until ctx is done, apply fails, or a
// gap (an error wrapping changefeed.ErrRebuild). It reconnects by itself
// when a NATS server goes away.
func (in *Instance) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	start, err := in.s.find(ctx, from)
	if err != nil {
		return err
	}
	_, err = in.s.read(ctx, start, from, 0, func(t changefeed.Txn, _ uint64) error { return apply(t) })
	return err
}

// Head returns the feeder's latest heartbeat, or ErrStaleHead when it has
// not changed for HeadTimeout.
func (in *Instance) Head(ctx context.Context) (changefeed.Position, error) {
	pos, rev, err := in.s.head(ctx)
	if err != nil {
		return 0, err
	}
	return in.head.Check(pos, rev, in.cfg.HeadTimeout, ErrStaleHead)
}

// Confirm does nothing: the stream keeps messages for Config.MaxAge.
func (in *Instance) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }
