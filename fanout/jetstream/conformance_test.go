package jetstream_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestConformance: the adapter keeps the fan-out transport contract, on a
// 3-node cluster with replicated assets.
func TestConformance(t *testing.T) {
	testsvc.Short(t, "starts a NATS cluster")
	cl := testsvc.SharedNATSCluster(t)
	ctx := context.Background()
	nc, err := connect(ctx, cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	fanouttest.Conformance(t, func(t *testing.T) fanout.Backend {
		var b [4]byte
		crand.Read(b[:])
		var set *jetstream.Set
		testsvc.Eventually(t, time.Minute, func() bool { // a fresh cluster elects its meta leader meanwhile
			set, err = jetstream.Open(ctx, jetstream.Config{JetStream: j, Set: "c" + hex.EncodeToString(b[:]), Replicas: 3, LeaseTTL: time.Second})
			return err == nil
		}, "jetstream.Open on a fresh cluster")
		t.Cleanup(func() { set.Delete(context.Background()) })
		return set.Backend()
	})
}
