package bloomgate

import "github.com/bloomgate/bloomgate/changefeed"

// Position returns the change-feed position whose transactions the gate's
// filter reflects (Follow): every transaction with End at or below it has
// been applied. It is 0 before Follow has loaded a snapshot or bootstrapped.
func (g *Gate) Position() changefeed.Position {
	return changefeed.Position(g.m.feedPosition.Load())
}

// PositionChanged returns a channel that is closed when Position next
// changes: a reader waiting for Position to reach a token takes the
// channel, checks Position, then waits on it, without polling. Every
// caller between two changes gets the same channel; it does not lock.
func (g *Gate) PositionChanged() <-chan struct{} {
	for {
		if p := g.posChanged.Load(); p != nil {
			return *p
		}
		ch := make(chan struct{})
		if g.posChanged.CompareAndSwap(nil, &ch) {
			return ch
		}
	}
}

// positionChanged wakes PositionChanged's waiters; it is called after the
// new position is stored, so that a waiter that took the channel before
// the store and read the old position is woken.
func (g *Gate) positionChanged() {
	if p := g.posChanged.Swap(nil); p != nil {
		close(*p)
	}
}

// MayContainAt is MayContain for a reader that must see every transaction
// up to pos: read-your-writes across instances, where pos is a token the
// writer took after its commit (for PostgreSQL, postgres.WritePosition on
// the writer's connection once COMMIT returned: pg_current_wal_insert_lsn(),
// not pg_current_wal_lsn(), which under synchronous_commit = off can be
// below the commit). It reports true ("maybe", look in the
// database) while Position is below pos, and while the last check of the
// feed's lag is more than MaxLag old (a process that was paused, or whose
// Follow stopped); otherwise it answers as MayContain. pos 0 only applies
// the second condition.
func (g *Gate) MayContainAt(key []byte, pos changefeed.Position) bool {
	if g.Position() < pos || g.clock() > g.freshUntil.Load() {
		g.failOpen(g.view.Load(), 1)
		return true
	}
	return g.MayContain(key)
}
