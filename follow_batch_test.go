package bloomgate

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// sizedTxnFeed streams, after an empty bootstrap, one transaction of each
// size in sizes (inserts of new keys, and a delete of the first key of the
// one before), publishing each transaction in txns before applying it; it
// closes done after the last.
type sizedTxnFeed struct {
	sizes []int
	mu    sync.Mutex
	txns  []changefeed.Txn
	done  chan struct{}
}

func (f *sizedTxnFeed) Bootstrap(context.Context, func([]byte) error) (changefeed.Position, error) {
	return 1, nil
}

func (f *sizedTxnFeed) Rebuild(context.Context, func([]byte) error) (changefeed.Position, error) {
	return 0, fmt.Errorf("sizedTxnFeed: no rebuilds")
}

func (f *sizedTxnFeed) Head(context.Context) (changefeed.Position, error)  { return 1, nil }
func (f *sizedTxnFeed) Confirm(context.Context, changefeed.Position) error { return nil }

func (f *sizedTxnFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	id := 0
	var prev []byte
	for j, n := range f.sizes {
		var cs []changefeed.Change
		if prev != nil {
			cs = append(cs, changefeed.Change{Kind: changefeed.Delete, Key: prev})
		}
		for range n {
			cs = append(cs, changefeed.Change{Kind: changefeed.Insert, Key: []byte("k" + strconv.Itoa(id))})
			id++
		}
		if n > 0 {
			prev = cs[len(cs)-n].Key
		}
		pos := changefeed.Position(2*j + 3)
		t := changefeed.Txn{Commit: pos - 1, End: pos, Changes: cs}
		f.mu.Lock()
		f.txns = append(f.txns, t)
		f.mu.Unlock()
		if err := apply(t); err != nil {
			return err
		}
	}
	close(f.done)
	<-ctx.Done()
	return ctx.Err()
}

// TestFollowBatchedApplyNoFalseNegative: the change feed's inserts reach a
// Bloom filter in batches; a reader that sees the gate's position at a
// transaction's end finds every key the transaction inserted in the
// serving filter, and the filter ends up bit for bit the one that one
// AddHash per insert builds (deletes, which a Bloom filter cannot apply,
// change nothing). Transactions span the batch's internal groups: empty, 1,
// 31–33, 64, 65 and 1,000 inserts.
func TestFollowBatchedApplyNoFalseNegative(t *testing.T) {
	const capacity = 100_000
	g, err := New(Config{Source: memfeed.NewSource(), Capacity: capacity, FPRate: 0.01})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	sizes := []int{0, 1, 2, 31, 32, 33, 64, 65, 1000}
	for i := range 60 {
		sizes = append(sizes, 1+i*17%200)
	}
	feed := &sizedTxnFeed{sizes: sizes, done: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var checked atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			p := g.Position() // then the filter: it holds at least what p covers
			v := g.view.Load()
			if v.f == nil {
				continue
			}
			feed.mu.Lock()
			txns := feed.txns
			feed.mu.Unlock()
			for _, tx := range txns {
				if tx.End > p {
					break
				}
				for _, c := range tx.Changes {
					if c.Kind == changefeed.Insert && !v.f.MayContainHash(filter.Hash(c.Key, v.seed)) {
						t.Errorf("false negative: %s of the transaction ending at %v, position %v", c.Key, tx.End, p)
						return
					}
				}
				checked.Add(1)
			}
		}
	})
	errc := make(chan error, 1)
	go func() { errc <- g.Follow(ctx, feed, FollowConfig{SnapshotInterval: time.Hour}) }()
	select {
	case <-feed.done:
	case err := <-errc:
		t.Fatal(err)
	}
	// On a busy machine the feed can end before the reader first runs: let
	// it check what the gate has applied by now before stopping it.
	for deadline := time.Now().Add(30 * time.Second); checked.Load() == 0 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond)
	}
	close(stop)
	wg.Wait()
	cancel()
	<-errc
	if checked.Load() == 0 {
		t.Fatal("the reader checked no transaction")
	}

	v := g.view.Load()
	got, ok := v.f.(*filter.Bloom)
	if !ok {
		t.Fatalf("the gate's filter is a %T, want a Bloom filter", v.f)
	}
	want, err := filter.NewBloom(filter.BloomConfig{Capacity: capacity, FPRate: 0.01, Seed: v.seed})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, tx := range feed.txns {
		for _, c := range tx.Changes {
			if c.Kind == changefeed.Insert {
				want.AddHash(filter.Hash(c.Key, v.seed))
				n++
			}
		}
	}
	var w, gb bytes.Buffer
	want.WriteTo(&w)
	got.WriteTo(&gb)
	if got.Items() != uint64(n) || !bytes.Equal(w.Bytes(), gb.Bytes()) {
		t.Fatalf("the filter after the feed (%d items) differs from one AddHash per insert (%d)", got.Items(), n)
	}
}
