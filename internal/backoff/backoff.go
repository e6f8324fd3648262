// Package backoff is the one retry delay bloomgate uses: a wait that starts
// at Min and doubles after every failure up to Max, and a sleep that ends
// early when its context is done.
package backoff

import (
	"context"
	"time"
)

// Backoff is an exponential backoff. Set Min and Max; the first delay is
// Min, every later one twice the one before, at most Max. It is not safe for
// concurrent use: each retry loop keeps its own.
type Backoff struct {
	Min, Max time.Duration
	cur      time.Duration
}

// Delay returns the delay the next Wait or Next will use.
func (b *Backoff) Delay() time.Duration {
	if b.cur == 0 {
		return b.Min
	}
	return b.cur
}

// Next returns the delay to wait now and doubles the one after it, up to Max.
func (b *Backoff) Next() time.Duration {
	d := b.Delay()
	b.cur = min(2*d, b.Max)
	return d
}

// Reset makes the next delay Min again (after a success).
func (b *Backoff) Reset() { b.cur = 0 }

// Wait sleeps for Next(). It returns ctx's error if ctx is done first.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep waits for d, or until ctx is done, whichever comes first, and
// returns ctx's error in the second case.
func Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
