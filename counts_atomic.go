//go:build race || purego

package bloomgate

import "sync/atomic"

// add counts one lookup and returns the count of its kind (maybe or absent)
// after it. It is the twin of counts_perp.go for the race detector and build
// tag purego: atomic adds on one shard, the same totals.
func (c *lookupCounts) add(present bool) uint64 {
	return atomic.AddUint64(&c.extra.n[slot(present)], 1)
}

// addN counts maybe and absent lookups of one batch.
func (c *lookupCounts) addN(maybe, absent uint64) {
	atomic.AddUint64(&c.extra.n[0], maybe)
	atomic.AddUint64(&c.extra.n[1], absent)
}
