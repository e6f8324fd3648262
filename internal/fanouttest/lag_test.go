package fanouttest

import (
	"context"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
)

// committedFeed delivers n transactions, all committed at commit, one
// after the other.
type committedFeed struct {
	changefeed.Feed
	commit time.Time
	n      int
}

func (f committedFeed) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	for i := range f.n {
		end := from + changefeed.Position(i+1)
		t := changefeed.Txn{Commit: end, End: end, Time: f.commit, Changes: []changefeed.Change{{Kind: changefeed.Insert, Key: []byte("k")}}}
		if err := apply(t); err != nil {
			return err
		}
	}
	return nil
}

// TestTimedFeedHeld: a transaction the feed could deliver only once the
// feeder's apply of the one before returned waited for the feeder, not
// for the database: the database's share ends before that wait, which
// Held reports.
func TestTimedFeedHeld(t *testing.T) {
	const hold = 30 * time.Millisecond
	commit := time.Now()
	f := &TimedFeed{Feed: committedFeed{commit: commit, n: 2}}
	var second time.Time // when apply got the second transaction
	err := f.Stream(context.Background(), 1, func(tx changefeed.Txn) error {
		if tx.End == 2 {
			time.Sleep(hold) // the feeder holds the feed
		} else {
			second = time.Now()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(f.lag) != 2 || len(f.held) != 2 {
		t.Fatalf("%d database shares and %d held times noted, want 2 and 2", len(f.lag), len(f.held))
	}
	// The whole hold came after the second transaction's commit.
	if f.held[1] < hold {
		t.Errorf("held %v, want at least the %v the first apply took", f.held[1], hold)
	}
	if limit := second.Sub(commit) - hold; f.lag[1] > limit {
		t.Errorf("database's share %v: more than its delivery less the hold (%v)", f.lag[1], limit)
	}
	if at, ok := f.received(3); !ok || !at.Equal(commit.Add(f.lag[1])) {
		t.Errorf("receipt %v (found %v), want the commit plus the database's share, %v", at, ok, commit.Add(f.lag[1]))
	}
}
