package filter_test

import (
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// stressBudget bounds how long each concurrent stress below runs (2 s, a
// quarter of a second under -short). It bounds a loop, it is not an
// assertion: a slow machine checks fewer lookups.
func stressBudget() time.Duration {
	if testing.Short() {
		return 250 * time.Millisecond
	}
	return 2 * time.Second
}

// heldKeys tracks which keys of a stress are held. Each key has an epoch,
// odd while held: it is bumped to odd after the key's Add returned nil and
// to even before its Remove is called. A reader that sees the same odd epoch
// before and after a lookup knows the key was present for the whole lookup
// (a bool would not do: a key removed and added back between the two reads
// would look held throughout).
type heldKeys struct {
	keys  [][]byte
	epoch []atomic.Uint64
}

func newHeldKeys(keys [][]byte) *heldKeys {
	return &heldKeys{keys: keys, epoch: make([]atomic.Uint64, len(keys))}
}

func (h *heldKeys) mark(i int)   { h.epoch[i].Add(1) } // even → odd: held
func (h *heldKeys) unmark(i int) { h.epoch[i].Add(1) } // odd → even: not held

// checkHeld looks up every held key once, returning the lookups made and the
// false negatives found. With count it checks Count ≥ 1 instead of
// MayContain (Count reads every slot rather than stopping at a match).
func (h *heldKeys) checkHeld(c *filter.Cuckoo, count bool) (lookups, misses int64) {
	for i, k := range h.keys {
		e := h.epoch[i].Load()
		if e&1 == 0 {
			continue
		}
		var present bool
		if count {
			present = c.Count(k) >= 1
		} else {
			present = c.MayContain(k)
		}
		if h.epoch[i].Load() != e {
			continue // removed (and maybe added back) meanwhile: either answer is right
		}
		lookups++
		if !present {
			misses++
		}
	}
	return lookups, misses
}

// TestCuckooVictimRehomeRace is the regression test for a false negative:
// when a Remove frees a slot, the victim fingerprint moves back into the
// table, and a lookup must not check the buckets before that move and the
// victim slot after it. A tiny table (one bucket set, MaxKicks 1) kept at
// ErrFull makes every Remove move the victim; one goroutine removes and adds
// while another looks up every held key. It runs for stressBudget and logs
// how many lookups it checked.
func TestCuckooVictimRehomeRace(t *testing.T) {
	c, err := filter.NewCuckoo(filter.CuckooConfig{Capacity: 1, BucketSize: 4, MaxKicks: 1, Seed: 5})
	if err != nil {
		t.Fatal(err)
	}
	cuckooChurn(t, c, filtertest.Emails(64, 90))
}

// TestCuckooGrowthRemoveRace churns a filter that grows to several
// sub-filters, with fingerprints so short that a Remove often matches in more
// than one sub-filter (ErrAmbiguous, nothing removed), while a reader looks
// up every held key: growth, kick chains, victim moves and refused removes
// must never hide a held key.
func TestCuckooGrowthRemoveRace(t *testing.T) {
	c, err := filter.NewCuckoo(filter.CuckooConfig{Capacity: 2, FPRate: 0.3, BucketSize: 2, MaxKicks: 4, MaxFilters: 5, Seed: 6})
	if err != nil {
		t.Fatal(err)
	}
	ambiguous := cuckooChurn(t, c, filtertest.Emails(96, 91))
	if len(c.FingerprintBits()) < 5 {
		t.Errorf("grew to %d sub-filters, want 5", len(c.FingerprintBits()))
	}
	if ambiguous == 0 {
		t.Error("no Remove was ambiguous: the test does not cover ErrAmbiguous")
	}
}

// cuckooChurn runs a writer and a reader on c for stressBudget. The writer
// adds keys until ErrFull, then repeatedly removes the oldest held key and
// adds free keys until one fits (a remove refused with ErrAmbiguous leaves
// the key held). The reader starts with the writer and looks up every held
// key, failing t on a false negative. It returns how many removes were
// ambiguous.
func cuckooChurn(t *testing.T, c *filter.Cuckoo, keys [][]byte) (ambiguous int64) {
	t.Helper()
	h := newHeldKeys(keys)
	stop := make(chan struct{})
	var lookups, misses, rounds atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() { // the writer
		var held, free []int // oldest first
		for i := range h.keys {
			if err := c.Add(h.keys[i]); err != nil {
				if !errors.Is(err, filter.ErrFull) {
					t.Errorf("Add: %v", err)
					return
				}
				free = append(free, i)
				continue
			}
			h.mark(i)
			held = append(held, i)
		}
		t.Logf("%d keys held, %d refused with ErrFull", len(held), len(free))
		for len(held) > 0 {
			select {
			case <-stop:
				return
			default:
			}
			old := held[0]
			held = held[1:]
			h.unmark(old)
			switch err := c.Remove(h.keys[old]); {
			case errors.Is(err, filter.ErrAmbiguous):
				h.mark(old) // still present
				held = append(held, old)
				ambiguous++
				continue
			case err != nil:
				t.Errorf("Remove of a held key: %v", err)
				return
			}
			free = append(free, old)
			for range len(free) {
				k := free[0]
				free = free[1:]
				if err := c.Add(h.keys[k]); err != nil {
					if !errors.Is(err, filter.ErrFull) {
						t.Errorf("Add: %v", err)
						return
					}
					free = append(free, k)
					continue
				}
				h.mark(k)
				held = append(held, k)
				break
			}
			rounds.Add(1)
		}
	})
	wg.Go(func() { // the reader
		for pass := 0; ; pass++ {
			select {
			case <-stop:
				return
			default:
			}
			l, m := h.checkHeld(c, pass%2 == 1)
			lookups.Add(l)
			misses.Add(m)
		}
	})
	time.Sleep(stressBudget())
	close(stop)
	wg.Wait()
	t.Logf("%d lookups of held keys checked during %d remove/add rounds (%d removes ambiguous)",
		lookups.Load(), rounds.Load(), ambiguous)
	if lookups.Load() == 0 {
		t.Fatal("no lookups checked")
	}
	if m := misses.Load(); m > 0 {
		t.Fatalf("%d false negatives in %d lookups of held keys", m, lookups.Load())
	}
	return ambiguous
}
