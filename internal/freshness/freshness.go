// Package freshness measures how far a change-feed consumer is behind the
// database. It is the one mechanism behind bloomgate.Follow's MaxLag and
// the max-lag of serve's expiring sets.
//
// # The invariant
//
// A mark (at, head) claims: every transaction committed before at ends at
// or before head. A consumer whose applied position has reached head has
// therefore applied every transaction committed before at, and is fresh
// while now − at ≤ MaxLag: a key committed more than MaxLag before a lookup
// is in the filter. The claim holds when at is no later than the moment the
// head was read from the database — the time taken before the read, or, for
// a head relayed by another process (a fan-out feeder's heartbeat), a lower
// bound of the moment that process read it. A mark stamped later than its
// read (a relayed head taken as "now") overstates freshness by the
// difference, and a relayed position that the relaying process did not read
// from the database (its own lagging stream) is no head at all: both give
// false negatives. Nothing else is needed: a stalled stream passes no new
// mark, so the newest passed mark ages and the consumer turns stale by
// itself.
package freshness

import (
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// Mark is one reading of the database's head: every transaction committed
// before At ends at or before Head.
type Mark struct {
	At   time.Time
	Head changefeed.Position
}

// Tracker holds the marks a consumer has not yet passed and the newest one
// it has. The zero value is empty. It is not safe for concurrent use: its
// owner serialises calls (under the lock that guards the applied position).
type Tracker struct {
	pending []Mark // not yet passed, oldest first
	passed  Mark
	has     bool
}

// maxPending bounds the marks kept while a consumer falls behind: a mark
// older than the newest passed one is worthless, and of the outstanding
// ones the oldest matter most (they are passed first). Beyond the bound
// the newest outstanding mark is replaced, which only delays freshness.
const maxPending = 4096

// Mark records a reading of the head.
func (t *Tracker) Mark(m Mark) {
	if t.has && !m.At.After(t.passed.At) {
		return // says nothing the passed mark does not
	}
	n := len(t.pending)
	if n > 0 && t.pending[n-1] == m {
		return // the same reading again
	}
	if n >= maxPending {
		t.pending[n-1] = m
		return
	}
	t.pending = append(t.pending, m)
}

// Advance passes every mark whose head is at or before applied and reports
// whether a newer mark was passed.
func (t *Tracker) Advance(applied changefeed.Position) bool {
	moved := false
	keep := t.pending[:0]
	for _, m := range t.pending {
		switch {
		case m.Head > applied:
			keep = append(keep, m)
		case !t.has || m.At.After(t.passed.At):
			t.passed, t.has, moved = m, true, true
		}
	}
	// Marks older than the newest passed one no longer matter.
	out := keep[:0]
	for _, m := range keep {
		if m.At.After(t.passed.At) || !t.has {
			out = append(out, m)
		}
	}
	clear(t.pending[len(out):])
	t.pending = out
	return moved
}

// Passed returns the newest mark passed, if any.
func (t *Tracker) Passed() (Mark, bool) { return t.passed, t.has }

// Newest returns the newest mark recorded: the newest outstanding one, or
// else the newest passed; false when there is none. (Follow's growth
// trigger reads the stream's backlog from it.)
func (t *Tracker) Newest() (Mark, bool) {
	if n := len(t.pending); n > 0 {
		return t.pending[n-1], true
	}
	return t.passed, t.has
}

// Lag returns how far behind the consumer is at now: the age of the newest
// passed mark; false when none has been passed.
func (t *Tracker) Lag(now time.Time) (time.Duration, bool) {
	if !t.has {
		return 0, false
	}
	return now.Sub(t.passed.At), true
}

// Reset forgets every mark (a new run of the consumer, from another
// position).
func (t *Tracker) Reset() { *t = Tracker{pending: t.pending[:0]} }
