package jetstream_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestOpenWaitsForTheCluster: Open on a cluster whose JetStream has lost
// its quorum (two of three nodes down, as while a cluster forms) succeeds
// once the nodes are back, within its context: a request that goes
// unanswered meanwhile is tried again, not waited on until the context
// ends (a server's first start on a just-formed cluster failed so, after
// its whole connect-timeout, on one lost reply).
func TestOpenWaitsForTheCluster(t *testing.T) {
	t.Parallel() // a cluster of its own
	c := testsvc.NewNATSCluster(t)
	c.Kill(1)
	c.Kill(2)
	nc, err := nats.Connect(c.URLs(), nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	j, err := js.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	type result struct {
		set  *jetstream.Set
		err  error
		took time.Duration
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		s, err := jetstream.Open(ctx, jetstream.Config{JetStream: j, Set: "quorum", Replicas: 3})
		done <- result{s, err, time.Since(start)}
	}()
	time.Sleep(3 * time.Second) // Open's first requests go unanswered or are refused
	select {
	case r := <-done:
		t.Fatalf("Open returned before the cluster had a quorum again: %v", r.err)
	default:
	}
	c.Start(1)
	c.Start(2)
	back := time.Since(start)
	r := <-done
	if r.err != nil {
		t.Fatalf("Open failed %v after the start, the nodes back after %v: %v", r.took.Round(time.Millisecond), back.Round(time.Millisecond), r.err)
	}
	t.Logf("Open took %v; the nodes were back after %v", r.took.Round(time.Millisecond), back.Round(time.Millisecond))
}
