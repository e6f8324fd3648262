package bloomgate

import (
	"runtime"
	"sync"
	"testing"
)

// TestLookupCountsExact: lookups counted from many goroutines at once, single
// and batched, add up exactly, also on Ps beyond the shards made at New
// (GOMAXPROCS raised later: here, one shard for all Ps).
func TestLookupCountsExact(t *testing.T) {
	for _, shards := range []int{runtime.GOMAXPROCS(0), 1} {
		c := &lookupCounts{shards: make([]countShard, shards)}
		const goroutines, rounds = 16, 20000
		var wg sync.WaitGroup
		for i := range goroutines {
			wg.Go(func() {
				for j := range rounds {
					if j%10 == 0 {
						c.addN(3, 2)
					} else {
						c.add((i+j)%3 == 0)
					}
					if j%1000 == 0 {
						runtime.Gosched() // move between Ps
					}
				}
			})
		}
		wg.Wait()
		var wantAll, wantAbsent uint64
		for i := range goroutines {
			for j := range rounds {
				switch {
				case j%10 == 0:
					wantAll, wantAbsent = wantAll+5, wantAbsent+2
				case (i+j)%3 == 0:
					wantAll++
				default:
					wantAll, wantAbsent = wantAll+1, wantAbsent+1
				}
			}
		}
		if all, absent := c.sum(); all != wantAll || absent != wantAbsent {
			t.Fatalf("%d shards: counted %d lookups, %d absent; want %d, %d", shards, all, absent, wantAll, wantAbsent)
		}
	}
}
