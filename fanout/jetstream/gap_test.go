package jetstream_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/fanout"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// insertAndWait commits n rows and waits until g has applied them.
func insertAndWait(t *testing.T, ip *inProcess, g *bloomgate.Gate, prefix string, n int) changefeed.Position {
	t.Helper()
	var tok changefeed.Position
	for i := range n {
		var err error
		if tok, err = ip.pg.Insert(context.Background(), fmt.Sprintf("%s%d@x", prefix, i)); err != nil {
			t.Fatal(err)
		}
	}
	testsvc.Eventually(t, time.Minute, func() bool { return g.Position() >= tok }, "the instance did not apply %s", tok)
	return tok
}

// streamErr starts an instance's Stream from the feeder's newest snapshot
// record (as Follow does after loading it) and runs it until it fails.
func streamErr(t *testing.T, ip *inProcess) error {
	t.Helper()
	in, err := ip.set.NewInstance(jetstream.InstanceConfig{HeadTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var from changefeed.Position
	if err := in.Snapshots().Load(ctx, func(r io.Reader) error {
		var hdr [16]byte
		_, err := io.ReadFull(r, hdr[:])
		from = changefeed.Position(binary.LittleEndian.Uint64(hdr[8:]))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return in.Stream(ctx, from, func(changefeed.Txn) error { return nil })
}

// A position whose messages the stream no longer holds is never continued
// from: Stream reports an error wrapping changefeed.ErrRebuild.
func TestTrimmedStreamIsRebuild(t *testing.T) {
	t.Parallel() // a set of its own; no node killed
	ip := startInProcess(t, 100, 1<<16)
	g, _ := ip.instance(t, 1<<16)
	insertAndWait(t, ip, g, "a", 20)
	insertAndWait(t, ip, g, "b", 20)
	stream, err := ip.js.Stream(context.Background(), "BG_"+ip.name)
	if err != nil {
		t.Fatal(err)
	}
	if err := stream.Purge(context.Background(), js.WithPurgeKeep(1)); err != nil {
		t.Fatal(err)
	}
	err = streamErr(t, ip)
	if !errors.Is(err, changefeed.ErrRebuild) {
		t.Fatalf("Stream from a trimmed position: %v, want an error wrapping ErrRebuild", err)
	}
	t.Logf("Stream from a trimmed position: %v", err)
	// The undisturbed instance goes on from the tail.
	insertAndWait(t, ip, g, "c", 20)
}

// A message that does not continue from the position applied (another
// history, such as a feeder that bootstrapped afresh) is a gap.
func TestForeignPrevIsRebuild(t *testing.T) {
	t.Parallel() // a set of its own; no node killed
	ip := startInProcess(t, 100, 1<<16)
	g, _ := ip.instance(t, 1<<16)
	insertAndWait(t, ip, g, "a", 20)
	ip.stopFeeder()
	stream, err := ip.js.Stream(context.Background(), "BG_"+ip.name)
	if err != nil {
		t.Fatal(err)
	}
	info, err := stream.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	last, err := stream.GetMsg(context.Background(), info.State.LastSeq)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fanout.DecodeBatch(last.Data, nil)
	if err != nil {
		t.Fatal(err)
	}
	end := b.End()
	foreign, _ := fanout.AppendBatch(nil, fanout.Batch{Term: b.Term, Prev: end + 100, Txns: []changefeed.Txn{{Commit: end + 200, End: end + 200,
		Changes: []changefeed.Change{{Kind: changefeed.Insert, Key: []byte("foreign@x")}}}}}, nil)
	m := nats.NewMsg("bloomgate." + ip.name)
	m.Data = foreign
	if _, err := ip.js.PublishMsg(context.Background(), m, js.WithExpectLastSequence(info.State.LastSeq)); err != nil {
		t.Fatal(err)
	}
	err = streamErr(t, ip)
	if !errors.Is(err, changefeed.ErrRebuild) || !errors.Is(err, fanout.ErrGap) {
		t.Fatalf("Stream across a foreign message: %v, want ErrGap wrapping ErrRebuild", err)
	}
	t.Logf("Stream across a foreign message: %v", err)
}

// TestJoin measures how long an instance takes to be ready from the
// feeder's object-store snapshot of BLOOMGATE_FANOUT_JOIN_KEYS keys
// (default 100000).
func TestJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("skipped in -short mode")
	}
	n := envInt("BLOOMGATE_FANOUT_JOIN_KEYS", 100000)
	ip := startInProcess(t, n, 0)
	g0, first := ip.instance(t, 0) // waits for the feeder's bootstrap snapshot
	insertAndWait(t, ip, g0, "j", 10)
	var best time.Duration
	for i := range 3 {
		_, d := ip.instance(t, 0)
		t.Logf("join %d: ready %v after its start", i, d.Round(100*time.Microsecond))
		if best == 0 || d < best {
			best = d
		}
	}
	// A restart from the instance's own local snapshot (written when its
	// Follow stopped), then the stream's tail.
	icfg := jetstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat, Local: bloomgate.DirSnapshots(t.TempDir())}
	_, _, stop := ip.instanceWith(t, 0, icfg)
	insertAndWait(t, ip, g0, "k", 10)
	stop()
	insertAndWait(t, ip, g0, "l", 10)
	var local time.Duration
	for i := range 3 {
		_, d, stop := ip.instanceWith(t, 0, icfg)
		stop()
		t.Logf("restart %d from the local snapshot: ready %v after its start", i, d.Round(100*time.Microsecond))
		if local == 0 || d < local {
			local = d
		}
	}
	var size uint64
	if obs, err := ip.js.ObjectStore(context.Background(), "BG_"+ip.name+"_snap"); err == nil {
		if infos, err := obs.List(context.Background()); err == nil {
			for _, o := range infos {
				size = max(size, o.Size)
			}
		}
	}
	t.Logf("%d keys (snapshot %.1f MiB): first instance %v (includes the feeder's bootstrap); later joins from the object store best %v; restarts from a local snapshot best %v",
		n, float64(size)/(1<<20), first.Round(time.Millisecond), best.Round(100*time.Microsecond), local.Round(100*time.Microsecond))
}
