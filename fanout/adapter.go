package fanout

import (
	"fmt"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// ValidSet reports whether s can name a set in every adapter's keys and
// subjects: 1 to 64 of A-Z a-z 0-9 _ -.
func ValidSet(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for _, c := range []byte(s) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// HeadWatch tells a feeder's heartbeat that still changes from one that has
// stopped: V is whatever changes with every heartbeat write (a KV revision,
// the stored value). It is safe for concurrent use.
type HeadWatch[V comparable] struct {
	mu   sync.Mutex
	last V
	seen time.Time // when last was first seen
}

// Check records that the heartbeat reads pos at version v, and returns pos,
// or an error wrapping stale once v has not changed for longer than timeout.
func (w *HeadWatch[V]) Check(pos changefeed.Position, v V, timeout time.Duration, stale error) (changefeed.Position, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	now := time.Now()
	if v != w.last {
		w.last, w.seen = v, now
	}
	if age := now.Sub(w.seen); age > timeout {
		return 0, fmt.Errorf("%w: unchanged for %v", stale, age.Round(time.Millisecond))
	}
	return pos, nil
}
