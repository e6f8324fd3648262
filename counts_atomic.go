//go:build race || purego

package bloomgate

import "sync/atomic"

// add counts one lookup and returns the absent count after it when the
// lookup was absent. It is the twin of counts_perp.go for the race detector
// and build tag purego: atomic adds on one shard, the same totals.
func (c *lookupCounts) add(present bool) (absent uint64) {
	if present {
		atomic.AddUint64(&c.extra.maybe, 1)
		return 0
	}
	return atomic.AddUint64(&c.extra.absent, 1)
}

// addN counts maybe and absent lookups of one batch.
func (c *lookupCounts) addN(maybe, absent uint64) {
	atomic.AddUint64(&c.extra.maybe, maybe)
	atomic.AddUint64(&c.extra.absent, absent)
}
