package memfeed

import (
	"context"
	"errors"
	"slices"
	"testing"

	"github.com/bloomgate/bloomgate/changefeed"
)

func scan(t *testing.T, s *Source) ([]string, error) {
	t.Helper()
	var got []string
	err := s.Scan(context.Background(), func(k []byte) error { got = append(got, string(k)); return nil })
	return got, err
}

func TestSource(t *testing.T) {
	s := NewSource("a", "b", "a", "c")
	s.Delete("b")
	s.Delete("nope")
	s.Insert("d")
	s.Delete("d") // the last one
	s.Insert("b")
	got, err := scan(t, s)
	if err != nil || !slices.Equal(got, []string{"a", "c", "b"}) {
		t.Fatalf("Scan: %q, %v", got, err)
	}
	if n, _ := s.Estimate(context.Background()); n != 3 || !s.Has("b") || s.Has("d") {
		t.Fatalf("Estimate %d, Has(b) %v, Has(d) %v", n, s.Has("b"), s.Has("d"))
	}
	s.SetEstimate(10)
	if n, _ := s.Estimate(context.Background()); n != 10 {
		t.Fatalf("Estimate after SetEstimate(10): %d", n)
	}
	s.FailAt(2)
	if got, err := scan(t, s); !errors.Is(err, ErrScan) || len(got) != 2 {
		t.Fatalf("FailAt(2): %q, %v", got, err)
	}
	s.FailAt(0)
	paused, resume := s.PauseAt(1)
	done := make(chan []string)
	go func() { got, _ := scan(t, s); done <- got }()
	<-paused
	s.Insert("late") // after the scan's snapshot
	resume()
	if got := <-done; len(got) != 3 {
		t.Fatalf("paused scan: %q", got)
	}
}

func TestFeed(t *testing.T) {
	ctx := context.Background()
	f := NewFeed("a")
	p1 := f.Commit([]string{"b"}, nil)
	p2 := f.Commit(nil, []string{"a"})
	if p1 != 3 || p2 != 5 {
		t.Fatalf("ends %d, %d; want 3, 5", p1, p2)
	}
	var keys []string
	pos, err := f.Bootstrap(ctx, func(k []byte) error { keys = append(keys, string(k)); return nil })
	if err != nil || pos != 6 || !slices.Equal(keys, []string{"b"}) {
		t.Fatalf("Bootstrap: %q at %d, %v", keys, pos, err)
	}
	if h, _ := f.Head(ctx); h != p2 {
		t.Fatalf("Head %d, want %d", h, p2)
	}
	sctx, cancel := context.WithCancel(ctx)
	var got []changefeed.Txn
	err = f.Stream(sctx, p1, func(tx changefeed.Txn) error { got = append(got, tx); cancel(); return nil })
	if !errors.Is(err, context.Canceled) || len(got) != 1 || got[0].End != p2 || got[0].Changes[0].Kind != changefeed.Delete {
		t.Fatalf("Stream from %d: %+v, %v", p1, got, err)
	}
	f.Lose("c")
	if err := f.Stream(ctx, p2, func(changefeed.Txn) error { return nil }); !errors.Is(err, changefeed.ErrRebuild) {
		t.Fatalf("Stream after Lose: %v", err)
	}
	if !f.Has("c") || f.Boots() != 1 {
		t.Fatalf("Has(c) %v, Boots %d", f.Has("c"), f.Boots())
	}
	f.Confirm(ctx, p1)
	f.Confirm(ctx, 1)
	if f.Confirmed() != p1 {
		t.Fatalf("Confirmed %d", f.Confirmed())
	}
}
