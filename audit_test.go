package bloomgate_test

import (
	"context"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// TestSelfAudit: "absent" answers are sampled and checked against the table;
// rows written behind the gate's back (no Add) are found, counted, and make
// the gate fail open until a rebuild; honest answers raise no alarm.
func TestSelfAudit(t *testing.T) {
	src := memfeed.NewSource(keys("user", 1000)...)
	g := newGate(t, bloomgate.Config{Source: src, AuditPerSecond: 1000,
		Audit: func(_ context.Context, key []byte) (bool, error) { return src.Has(string(key)), nil }})
	if err := g.Warm(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys("nobody", 20000) {
		g.MayContainString(k)
	}
	waitFor(t, func() bool { return g.Stats().AuditSamples >= 10 })
	if s := g.Stats(); s.AuditFalseNegatives != 0 || !g.Ready() {
		t.Fatalf("honest answers raised an alarm: %+v", s)
	}

	sneaky := keys("sneaky", 2000)
	for _, k := range sneaky {
		src.Insert(k) // committed without Add: the filter cannot know
	}
	waitFor(t, func() bool {
		for _, k := range sneaky {
			g.MayContainString(k)
		}
		return g.Stats().AuditFalseNegatives > 0
	})
	if g.Ready() {
		t.Fatal("a false negative found by the audit left the gate ready")
	}
	checkNoFalseNegatives(t, g, sneaky) // failing open
	if err := g.Rebuild(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkNoFalseNegatives(t, g, sneaky)
}
