package bloomgate

import (
	"runtime"
	"sync/atomic"
)

// lookupCounts counts the lookups answered from the filter, and the absent
// ones, exactly, without making lookups on different cores write one cache
// line or pay for a locked instruction: one shard per P (the scheduler's
// processors, GOMAXPROCS of them), each written only by the goroutine
// running on its P. A locked add per lookup would also order every memory
// access around it, so a loop of lookups could no longer overlap one key's
// cache miss with the next one's. counts_perp.go and counts_atomic.go hold
// the two ways to write a shard.
type lookupCounts struct {
	shards []countShard // indexed by P id
	// extra counts, with atomic adds, lookups on Ps beyond len(shards)
	// (GOMAXPROCS raised after New).
	extra countShard
}

// countShard counts maybe (n[0]) and absent (n[1]) answers.
type countShard struct {
	n [2]uint64
	_ [48]byte // a cache line per shard
}

// slot is the index into countShard.n for an answer.
func slot(present bool) int {
	i := 1
	if present {
		i = 0
	}
	return i
}

func newLookupCounts() *lookupCounts {
	return &lookupCounts{shards: make([]countShard, runtime.GOMAXPROCS(0))}
}

// sum returns all lookups and the absent ones. It reads each shard with
// atomic loads: the totals are exact once the lookups counted have returned.
func (c *lookupCounts) sum() (lookups, absent uint64) {
	for i := range c.shards {
		m, a := atomic.LoadUint64(&c.shards[i].n[0]), atomic.LoadUint64(&c.shards[i].n[1])
		lookups += m + a
		absent += a
	}
	m, a := atomic.LoadUint64(&c.extra.n[0]), atomic.LoadUint64(&c.extra.n[1])
	return lookups + m + a, absent + a
}
