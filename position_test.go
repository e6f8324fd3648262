package bloomgate_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// TestMayContainAt: a reader holding a writer's token gets "maybe" until the
// gate has applied the token's position, and MayContain's answer after.
func TestMayContainAt(t *testing.T) {
	feed := memfeed.NewFeed(keys("user", 100)...)
	g, stop := follow(t, feed, bloomgate.Config{Source: memfeed.NewSource(keys("user", 100)...)}, bloomgate.FollowConfig{})
	defer stop()
	if g.MayContainAt([]byte("never"), g.Position()) {
		t.Fatal("an absent key at the applied position: maybe")
	}
	feed.SetPaused(true)
	tok := feed.Commit([]string{"new"}, nil)
	if g.Position() >= tok {
		t.Fatalf("position %v already at the token %v of a paused feed", g.Position(), tok)
	}
	if !g.MayContainAt([]byte("new"), tok) || !g.MayContainAt([]byte("never"), tok) {
		t.Fatal("MayContainAt below the token answered absent")
	}
	feed.SetPaused(false)
	waitApplied(t, g, tok)
	if g.Position() < tok {
		t.Fatalf("Position %v after applying %v", g.Position(), tok)
	}
	if !g.MayContainAt([]byte("new"), tok) {
		t.Fatal("the writer's key is absent at its token")
	}
	if g.MayContainAt([]byte("never"), tok) {
		t.Fatal("an absent key at an applied token: maybe")
	}
}

// TestPositionChanged: a reader that took PositionChanged's channel below a
// token is woken once the gate applies it, without polling, however the
// token's application races with its look at Position.
func TestPositionChanged(t *testing.T) {
	feed := memfeed.NewFeed(keys("user", 100)...)
	g, stop := follow(t, feed, bloomgate.Config{Source: memfeed.NewSource(keys("user", 100)...)}, bloomgate.FollowConfig{})
	defer stop()
	for i := range 200 {
		tok := feed.Commit([]string{fmt.Sprintf("new%d", i)}, nil)
		timeout := time.After(10 * time.Second)
		for {
			ch := g.PositionChanged()
			if g.Position() >= tok {
				break
			}
			select {
			case <-ch:
			case <-timeout:
				t.Fatalf("not woken: position %v, token %v", g.Position(), tok)
			}
		}
	}
}
