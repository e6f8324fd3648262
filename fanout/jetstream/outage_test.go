package jetstream_test

import (
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
)

// TestFeederOutage: on a 3-node cluster, both feeders stop while rows are
// written, past the instances' HeadTimeout + MaxLag, and one starts again
// from its snapshot, five times: no instance answers "absent" for a row
// committed more than MaxLag before the lookup, through the outage and the
// catch-up (a new term's feeder catching up used to look current).
func TestFeederOutage(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	ip := startInProcess(t, 10000, 1<<20)
	g1, _ := ip.instance(t, 1<<20)
	g2, _ := ip.instance(t, 1<<20)
	b := ip.startFeeder(t, 1<<20)
	fanouttest.Outage(t, fanouttest.OutageConfig{
		PG: ip.pg, Instances: []*bloomgate.Gate{g1, g2}, Feeders: []func(){ip.stopFeeder, b},
		StartFeeder: func() func() { return ip.startFeeder(t, 1<<20) },
		Bound:       testMaxLag, Down: 10*testHeartbeat + testMaxLag + 2*time.Second, Up: 3 * time.Second, Cycles: fanouttest.OutageCycles(),
	})
}
