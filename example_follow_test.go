package bloomgate_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
)

// memLog is an in-memory table with a commit log: a bloomgate.Feed, as
// source/postgres.Feed is over logical replication. Transaction k commits at
// position 2k and ends at 2k+1; a snapshot taken after it is at 2k+2.
type memLog struct {
	mu      sync.Mutex
	changed *sync.Cond
	rows    map[string]bool
	log     []changefeed.Txn
}

func newMemLog(keys ...string) *memLog {
	l := &memLog{rows: map[string]bool{}}
	l.changed = sync.NewCond(&l.mu)
	for _, k := range keys {
		l.rows[k] = true
	}
	return l
}

// insert commits one transaction, as any writer would (psql, another
// service), and returns its end position.
func (l *memLog) insert(keys ...string) changefeed.Position {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := changefeed.Position(len(l.log) + 1)
	t := changefeed.Txn{Commit: 2 * k, End: 2*k + 1, Time: time.Now()}
	for _, key := range keys {
		l.rows[key] = true
		t.Changes = append(t.Changes, changefeed.Change{Kind: changefeed.Insert, Key: []byte(key)})
	}
	l.log = append(l.log, t)
	l.changed.Broadcast()
	return t.End
}

func (l *memLog) snapshot(fn func([]byte) error) (changefeed.Position, error) {
	l.mu.Lock()
	keys := make([]string, 0, len(l.rows))
	for k := range l.rows {
		keys = append(keys, k)
	}
	pos := changefeed.Position(2*len(l.log) + 2)
	l.mu.Unlock()
	for _, k := range keys {
		if err := fn([]byte(k)); err != nil {
			return 0, err
		}
	}
	return pos, nil
}

func (l *memLog) Bootstrap(ctx context.Context, fn func([]byte) error) (changefeed.Position, error) {
	return l.snapshot(fn)
}

func (l *memLog) Rebuild(ctx context.Context, fn func([]byte) error) (changefeed.Position, error) {
	return l.snapshot(fn)
}

func (l *memLog) Stream(ctx context.Context, from changefeed.Position, apply func(changefeed.Txn) error) error {
	stop := context.AfterFunc(ctx, func() { l.mu.Lock(); l.changed.Broadcast(); l.mu.Unlock() })
	defer stop()
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := 0; ; i++ {
		for ctx.Err() == nil && i == len(l.log) {
			l.changed.Wait()
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if t := l.log[i]; t.End > from {
			l.mu.Unlock()
			err := apply(t)
			l.mu.Lock()
			if err != nil {
				return err
			}
		}
	}
}

func (l *memLog) Head(ctx context.Context) (changefeed.Position, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.log) == 0 {
		return 0, nil
	}
	return l.log[len(l.log)-1].End, nil
}

func (l *memLog) Confirm(ctx context.Context, pos changefeed.Position) error { return nil }

// Follow sizes its filters from Config.Source's estimate only.
func (l *memLog) Scan(ctx context.Context, fn func([]byte) error) error {
	_, err := l.snapshot(fn)
	return err
}

func (l *memLog) Estimate(ctx context.Context) (int64, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.rows)), nil
}

// A gate that follows the table's change feed sees every writer's rows, not
// only those the application passes to Add.
func ExampleGate_Follow() {
	feed := newMemLog("alice@example.com", "bob@example.com")
	g, err := bloomgate.New(bloomgate.Config{Source: feed})
	if err != nil {
		panic(err)
	}
	defer g.Close()

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- g.Follow(ctx, feed, bloomgate.FollowConfig{MaxLag: 5 * time.Second}) }()

	// waitUntil polls with a deadline: Follow applies the feed in the background.
	waitUntil := func(what string, cond func() bool) {
		for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				panic("timed out waiting for " + what)
			}
		}
	}
	waitUntil("ready", g.Ready)
	fmt.Println("ready; bob:", g.MayContainString("bob@example.com"), "carol:", g.MayContainString("carol@example.com"))

	// Another service inserts carol without telling the gate; the feed does.
	pos := feed.insert("carol@example.com")
	waitUntil("carol", func() bool { return g.Position() >= pos })
	fmt.Println("applied; carol:", g.MayContainString("carol@example.com"))

	cancel()
	fmt.Println("Follow returned:", <-done)
	// Output:
	// ready; bob: true carol: false
	// applied; carol: true
	// Follow returned: context canceled
}
