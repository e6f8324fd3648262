package postgres_test

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestSlotInUseSaysWhy: a second feed of the same slot, while the first
// streams from it, fails its bootstrap with an error that says what to do:
// give each process its own slot, or share the feed through fan-out.
func TestSlotInUseSaysWhy(t *testing.T) {
	fx := newFeedFixture(t, "")
	ctx := context.Background()
	f1 := fx.feed(t)
	c := newConsumer()
	p, err := f1.Bootstrap(ctx, c.add)
	if err != nil {
		t.Fatal(err)
	}
	stop := c.stream(f1, p)
	defer stop()
	time.Sleep(300 * time.Millisecond) // the stream holds the slot
	_, err = fx.feed(t).Bootstrap(ctx, newConsumer().add)
	if err == nil || !strings.Contains(err.Error(), "its own slot") {
		t.Fatalf("a second bootstrap of an active slot: %v, want an error saying to give each process its own slot", err)
	}
}
