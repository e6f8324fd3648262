package bloomgate

import (
	"context"
	"fmt"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// auditEvery is the share of "absent" answers offered to the self-audit:
// every auditEvery-th counted on a P (counts.go). Offers beyond what the audit
// can check are dropped, so lookups never wait for it.
const auditEvery = 64

// audit checks a sample of "absent" answers against the table, at most
// Config.AuditPerSecond a second, until the gate is closed.
func (g *Gate) audit(ch <-chan []byte, stop <-chan struct{}) {
	every := time.Duration(float64(time.Second) / g.cfg.AuditPerSecond)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		var key []byte
		select {
		case key = <-ch:
		case <-stop:
			return
		}
		g.auditOne(key)
	}
}

// auditOne checks one key the filter answered "absent" for.
func (g *Gate) auditOne(nk []byte) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	found, err := g.cfg.Audit(ctx, nk)
	if err != nil {
		g.cfg.Logger.Warn("bloomgate: self-audit query failed", "err", err)
		return
	}
	g.m.auditSamples.Add(1)
	if !found || g.mayContainNormalized(nk) {
		return // absent indeed, or added since the answer
	}
	// A row the filter does not hold. While following a feed it may be a
	// row committed after the answer and not applied yet: wait for the feed
	// to catch up once before calling it a false negative.
	if g.isFollowing() {
		time.Sleep(g.followLag())
		if g.mayContainNormalized(nk) {
			return
		}
	}
	// Fail open before counting: whoever sees the count (Stats, the
	// metric) finds the gate already failing open.
	v := g.view.Load()
	g.Degrade("self-audit found a row the filter answered absent for")
	g.m.auditFalseNegatives.Add(1)
	g.cfg.Logger.Error("bloomgate: self-audit found a false negative; failing open and rebuilding",
		"key_hash", fmt.Sprintf("%016x", filter.Hash(nk, v.seed)))
}

// mayContainNormalized looks up an already normalised key.
func (g *Gate) mayContainNormalized(nk []byte) bool {
	v := g.view.Load()
	if !g.answers(v) || len(nk) > g.cfg.MaxKeyLen {
		return true
	}
	return v.f.MayContainHash(filter.Hash(nk, v.seed))
}

func (g *Gate) isFollowing() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.following
}

// followLag is how long to wait for a feed to apply what was committed now.
func (g *Gate) followLag() time.Duration {
	return max(2*time.Duration(g.m.feedLag.Load()), time.Second)
}
