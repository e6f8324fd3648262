//go:build !race && !purego

package bloomgate

import (
	"sync/atomic"
	_ "unsafe" // go:linkname
)

// procPin pins the calling goroutine to its P and returns the P's id; until
// procUnpin nothing else runs on that P. The runtime exports both for this
// use (sync.Pool's per-P pools use them the same way).
//
//go:linkname procPin runtime.procPin
func procPin() int

//go:linkname procUnpin runtime.procUnpin
func procUnpin()

// add counts one lookup and returns the count of its kind (maybe or absent)
// on this P, after it. Pinned to its P, the goroutine is the only writer of
// the P's shard, so a plain add suffices; Stats reads shards with atomic
// loads, which on every architecture Go supports see whole words.
// counts_atomic.go is the twin for the race detector (which would flag the
// plain adds) and build tag purego: atomic adds on one shard.
func (c *lookupCounts) add(present bool) uint64 {
	i := slot(present)
	var n uint64
	if p := procPin(); p < len(c.shards) {
		s := &c.shards[p].n[i]
		*s++
		n = *s
	} else {
		n = atomic.AddUint64(&c.extra.n[i], 1)
	}
	procUnpin()
	return n
}

// addN counts maybe and absent lookups of one batch.
func (c *lookupCounts) addN(maybe, absent uint64) {
	if p := procPin(); p < len(c.shards) {
		s := &c.shards[p]
		s.n[0] += maybe
		s.n[1] += absent
	} else {
		atomic.AddUint64(&c.extra.n[0], maybe)
		atomic.AddUint64(&c.extra.n[1], absent)
	}
	procUnpin()
}
