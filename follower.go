package bloomgate

import (
	"context"
	"errors"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ErrFollowerSnapshots reports a FollowConfig given to Gate.Follower with
// its Snapshots set: a follower's snapshots go where its driver says.
var ErrFollowerSnapshots = errors.New("bloomgate: Follower: FollowConfig.Snapshots is set by the follower's driver")

// Follower is a gate following feeds with one FollowConfig, as a fan-out
// feeder drives it (changefeed.Follower; fanout.FeederConfig.Gate). It is
// safe for concurrent use; one Follow runs at a time, as Gate.Follow.
type Follower struct {
	g   *Gate
	cfg FollowConfig
}

var _ changefeed.Follower = (*Follower)(nil)

// Follower returns g as a changefeed.Follower whose Follow runs
// g.Follow(ctx, feed, cfg) with the snapshot store it is given. cfg
// configures everything else (Identity, which instances must share;
// SnapshotInterval, how often a snapshot is uploaded; MaxLag, …). Its
// Snapshots must be nil (ErrFollowerSnapshots).
func (g *Gate) Follower(cfg FollowConfig) (*Follower, error) {
	if cfg.Snapshots != nil {
		return nil, ErrFollowerSnapshots
	}
	return &Follower{g: g, cfg: cfg}, nil
}

// Follow implements changefeed.Follower: Gate.Follow over feed, saving to
// and starting from snapshots (nil: none). It returns ErrClosed once the
// gate is closed.
func (f *Follower) Follow(ctx context.Context, feed changefeed.Feed, snapshots changefeed.SnapshotStore) error {
	cfg := f.cfg
	cfg.Snapshots = snapshots
	return f.g.Follow(ctx, feed, cfg)
}

// Builds implements changefeed.Follower: Stats().Builds.
func (f *Follower) Builds() uint64 { return f.g.m.builds.Load() }
