package jetstream_test

import (
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestConformance: the adapter keeps the fan-out transport contract, on a
// 3-node cluster with replicated assets.
func TestConformance(t *testing.T) {
	testsvc.Short(t, "starts a NATS cluster")
	j := sharedJetStream(t)
	fanouttest.Conformance(t, func(t *testing.T) fanout.Backend {
		return openSet(t, jetstream.Config{JetStream: j, Replicas: 3, LeaseTTL: time.Second}, "c").Backend()
	})
}
