package serve

import "github.com/bloomgate/bloomgate/changefeed"

// Position returns the change-feed position the set's filter reflects: every
// transaction ending at or before it has been applied (0 in ModeRebuild,
// and before the feed has loaded or bootstrapped). It does not block.
func (t *Set) Position() changefeed.Position { return t.gate.Position() }

// Follows reports whether the set follows a change feed (ModeFollow), so
// that its Position means something.
func (t *Set) Follows() bool { return t.cfg.Keeper != nil }

// MayContainAt is Store.MayContainAt on this set: false only if item is
// definitely absent as of pos (see bloomgate.Gate.MayContainAt). A set in
// ModeRebuild reports true: it has no position.
func (t *Set) MayContainAt(item []byte, pos changefeed.Position) bool {
	if t.cfg.Keeper == nil {
		return true
	}
	return t.gate.MayContainAt(item, pos)
}

// PositionChanged returns a channel closed when Position next changes (see
// bloomgate.Gate.PositionChanged).
func (t *Set) PositionChanged() <-chan struct{} { return t.gate.PositionChanged() }
