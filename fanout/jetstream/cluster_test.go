package jetstream_test

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/backoff"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// connect connects to the cluster, reconnecting forever.
func connect(ctx context.Context, urls string) (*nats.Conn, error) {
	for {
		nc, err := nats.Connect(urls, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond), nats.RetryOnFailedConnect(true))
		if err == nil {
			return nc, nil
		}
		if backoff.Sleep(ctx, 100*time.Millisecond) != nil {
			return nil, err
		}
	}
}

// sharedJetStream connects to the package's shared 3-node cluster
// (testsvc.SharedNATSCluster) for the test's duration: for tests that kill
// no node.
func sharedJetStream(t testing.TB) js.JetStream {
	t.Helper()
	cl := testsvc.SharedNATSCluster(t)
	nc, err := connect(context.Background(), cl.URLs())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// openSet opens a set named prefix and 8 random hex digits on cfg's
// JetStream, retrying for up to a minute while a fresh cluster elects its
// meta leader, and deletes it when the test ends (after the cleanups
// registered later, which stop what runs on it).
func openSet(t testing.TB, cfg jetstream.Config, prefix string) *jetstream.Set {
	t.Helper()
	var b [4]byte
	crand.Read(b[:])
	cfg.Set = prefix + hex.EncodeToString(b[:])
	set, err := jetstream.Open(context.Background(), cfg)
	for deadline := time.Now().Add(time.Minute); err != nil; set, err = jetstream.Open(context.Background(), cfg) {
		if time.Now().After(deadline) {
			t.Fatalf("jetstream.Open %s for a minute: %v", cfg.Set, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Cleanup(func() { set.Delete(context.Background()) })
	return set
}
