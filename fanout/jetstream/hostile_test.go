package jetstream_test

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
)

// healWithin is how long a set may take to be ready again, serving new
// rows on every instance, after a hostile message, without an operator.
const healWithin = 20 * time.Second

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

// hostileRun runs writers against the table and checks every committed row
// on every instance (MayContainAt with its token, MayContain once the row is
// older than MaxLag) while inject damages the stream; then the set must
// serve a new row on every instance within healWithin.
func hostileRun(t *testing.T, ip *inProcess, insts []*bloomgate.Gate, inject func()) {
	t.Helper()
	type row struct {
		key   string
		token changefeed.Position
		at    time.Time
	}
	var mu sync.Mutex
	var rows []row
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			key := fmt.Sprintf("h%d@x", n)
			tok, err := ip.pg.Insert(ctx, key)
			if err != nil {
				continue
			}
			mu.Lock()
			rows = append(rows, row{key, tok, time.Now()})
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
	var fn, fnAt, checked int
	check := func() {
		mu.Lock()
		all := rows
		mu.Unlock()
		for i, g := range insts {
			for _, r := range all {
				checked++
				if !g.MayContainAt([]byte(r.key), r.token) {
					fnAt++
					if fnAt <= 3 {
						t.Errorf("FALSE NEGATIVE: instance %d: MayContainAt(%q, %v) at position %v", i, r.key, r.token, g.Position())
					}
				}
				if time.Since(r.at) > testMaxLag+time.Second && !g.MayContain([]byte(r.key)) {
					fn++
					if fn <= 3 {
						t.Errorf("FALSE NEGATIVE: instance %d: MayContain(%q) committed %v ago", i, r.key, time.Since(r.at).Round(time.Millisecond))
					}
				}
			}
		}
	}
	for range 20 {
		check()
		time.Sleep(25 * time.Millisecond)
	}
	inject()
	injected := time.Now()
	// Healed: a row committed now is served by every instance, ready.
	key := "healed@x"
	tok, err := ip.pg.Insert(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var healed time.Duration
	for healed == 0 || time.Since(injected) < 3*time.Second {
		check()
		ok := true
		for _, g := range insts {
			if !g.Ready() || g.Position() < tok || !g.MayContain([]byte(key)) {
				ok = false
			}
		}
		if ok && healed == 0 {
			healed = time.Since(injected)
		}
		if healed == 0 && time.Since(injected) > healWithin {
			t.Errorf("the set is not serving new rows %v after the hostile message", healWithin)
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	stop()
	wg.Wait()
	check()
	t.Logf("%d lookups checked, %d MayContainAt and %d MayContain false negatives; ready with new rows %v after the message",
		checked, fnAt, fn, healed.Round(time.Millisecond))
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
			hostileRun(t, ip, []*bloomgate.Gate{g1, g2}, func() { publishForeign(t, ip, tc.msg(t, ip)) })
		})
	}
}

// Open with a Config that disagrees with the set's existing assets is an
// error, and leaves them as they are.
func TestOpenNeverWeakens(t *testing.T) {
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
