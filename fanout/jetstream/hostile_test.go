package jetstream_test

import (
	"context"
	crand "crypto/rand"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/fanouttest"
)

// lastBatch returns the stream's last message, decoded, and its sequence.
func lastBatch(t *testing.T, ip *inProcess) (fanout.Batch, []byte, uint64) {
	t.Helper()
	stream, err := ip.js.Stream(context.Background(), "BG_"+ip.name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	m, err := stream.GetMsg(context.Background(), info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fanout.DecodeBatch(m.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	return b, m.Data, info.State.LastSeq
}

// publishForeign publishes data into the set's subject as another client
// would: no expected sequence, no message ID.
func publishForeign(t *testing.T, ip *inProcess, data []byte) {
	t.Helper()
	m := nats.NewMsg("bloomgate." + ip.name)
	m.Data = data
	if _, err := ip.js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
}

func TestHostileMessages(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-second scenario, skipped in -short mode")
	}
	for _, tc := range []struct {
		name string
		msg  func(t *testing.T, ip *inProcess) []byte
	}{
		{"forged far-ahead marker", func(t *testing.T, ip *inProcess) []byte {
			b, _, _ := lastBatch(t, ip)
			p, _ := fanout.AppendBatch(nil, fanout.Batch{Term: b.Term, Prev: b.End(), Txns: []changefeed.Txn{{Commit: b.End() + 1<<40, End: b.End() + 1<<40}}}, nil)
			return p
		}},
		{"forged continuation", func(t *testing.T, ip *inProcess) []byte {
			b, _, _ := lastBatch(t, ip)
			p, _ := fanout.AppendBatch(nil, fanout.Batch{Term: b.Term, Prev: b.End(), Txns: []changefeed.Txn{{Commit: b.End() + 8, End: b.End() + 16,
				Changes: []changefeed.Change{{Kind: changefeed.Insert, Key: []byte("forged@x")}}}}}, nil)
			return p
		}},
		{"random bytes", func(t *testing.T, ip *inProcess) []byte {
			p := make([]byte, 64)
			crand.Read(p)
			return p
		}},
		{"flipped bit", func(t *testing.T, ip *inProcess) []byte {
			_, data, _ := lastBatch(t, ip)
			p := append([]byte(nil), data...)
			p[len(p)/2] ^= 0x10
			return p
		}},
		{"empty message", func(t *testing.T, ip *inProcess) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ip := startInProcess(t, 1000, 1<<16)
			g1, _ := ip.instance(t, 1<<16)
			g2, _ := ip.instance(t, 1<<16)
			fanouttest.Hostile(t, ip.pg, testMaxLag, []*bloomgate.Gate{g1, g2}, func() { publishForeign(t, ip, tc.msg(t, ip)) })
		})
	}
}

// Open with a Config that disagrees with the set's existing assets is an
// error, and leaves them as they are.
func TestOpenNeverWeakens(t *testing.T) {
	t.Parallel() // a set of its own; no node killed
	ip := startInProcess(t, 10, 1<<16)
	_, err := jetstreamOpenDefault(ip)
	if err == nil {
		t.Errorf("Open with the default Config (1 replica) over an R3 set succeeded")
	}
	stream, serr := ip.js.Stream(context.Background(), "BG_"+ip.name)
	if serr != nil {
		t.Fatal(serr)
	}
	if r := stream.CachedInfo().Config.Replicas; r != 3 {
		t.Errorf("the stream has %d replicas after the mismatched Open, want 3", r)
	}
	t.Logf("Open with the default Config: %v", err)
	var _ js.JetStream = ip.js
}

func jetstreamOpenDefault(ip *inProcess) (*jetstream.Set, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return jetstream.Open(ctx, jetstream.Config{JetStream: ip.js, Set: ip.name})
}

// TestTailLost: the stream loses its last messages after PostgreSQL was
// told their positions are durable (as JetStream may on a power loss
// before its fsync), with the feeder gone at the same time. The next
// feeder must not continue from the shorter tail: it starts a new history
// from the database, and no instance answers "absent" for a committed row.
func TestTailLost(t *testing.T) {
	if testing.Short() {
		t.Skip("multi-second scenario, skipped in -short mode")
	}
	ip := startInProcess(t, 1000, 1<<16)
	g1, _ := ip.instance(t, 1<<16)
	g2, _ := ip.instance(t, 1<<16)
	fanouttest.Hostile(t, ip.pg, testMaxLag, []*bloomgate.Gate{g1, g2}, func() {
		ip.stopFeeder()
		stream, err := ip.js.Stream(context.Background(), "BG_"+ip.name)
		if err != nil {
			t.Fatal(err)
		}
		info, err := stream.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		lost := 0
		for seq := info.State.LastSeq; seq > info.State.FirstSeq && lost < 5; seq-- {
			if err := stream.DeleteMsg(context.Background(), seq); err == nil {
				lost++
			}
		}
		t.Logf("deleted the stream's last %d messages (of %d), feeder stopped", lost, info.State.Msgs)
		ip.startFeeder(t, 1<<16)
	})
}
