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

// add counts one lookup. Pinned to its P, the goroutine is the only writer
// of the P's shard, so a plain add suffices; Stats reads shards with atomic
// loads, which on every architecture Go supports see whole words.
// counts_atomic.go is the twin for the race detector (which would flag the
// plain adds) and build tag purego: atomic adds on one shard.
func (c *lookupCounts) add(present bool) (absent uint64) {
	p := procPin()
	if p < len(c.shards) {
		s := &c.shards[p]
		if present {
			s.maybe++
		} else {
			s.absent++
			absent = s.absent
		}
	} else if present {
		atomic.AddUint64(&c.extra.maybe, 1)
	} else {
		absent = atomic.AddUint64(&c.extra.absent, 1)
	}
	procUnpin()
	return absent
}

// addN counts maybe and absent lookups of one batch.
func (c *lookupCounts) addN(maybe, absent uint64) {
	p := procPin()
	if p < len(c.shards) {
		s := &c.shards[p]
		s.maybe += maybe
		s.absent += absent
	} else {
		atomic.AddUint64(&c.extra.maybe, maybe)
		atomic.AddUint64(&c.extra.absent, absent)
	}
	procUnpin()
}
