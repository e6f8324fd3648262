package jetstream_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"testing"
	"time"

	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// replaceChunks puts data in place of the object's chunks, in chunks of
// the object store's chunk size: the old chunk messages are deleted and the new
// ones published on the object's chunk subject, so the object's info (its
// size and SHA-256) is the original's. As a damaged block on a server's
// disk would, or anyone allowed to publish on the object store's subjects.
func replaceChunks(t *testing.T, j js.JetStream, bucket, object string, data []byte) {
	t.Helper()
	ctx := context.Background()
	obs, err := j.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	info, err := obs.GetInfo(ctx, object)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := j.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	subject := "$O." + bucket + ".C." + info.NUID
	size := 128 << 10 // nats.go's default chunk size, the feeder's
	if info.Opts != nil && info.Opts.ChunkSize > 0 {
		size = int(info.Opts.ChunkSize)
	}
	for seq, i := uint64(1), uint32(0); i < info.Chunks; i++ {
		m, err := stream.GetMsg(ctx, seq, js.WithGetMsgSubject(subject))
		if err != nil {
			t.Fatal(err)
		}
		if err := stream.DeleteMsg(ctx, m.Sequence); err != nil {
			t.Fatal(err)
		}
		seq = m.Sequence + 1
	}
	for len(data) > 0 {
		n := min(size, len(data))
		if _, err := j.Publish(ctx, subject, data[:n]); err != nil {
			t.Fatal(err)
		}
		data = data[n:]
	}
}

// TestJoinRefusesDamagedSnapshot: an instance of an unsigned set never
// joins from a snapshot object whose bytes differ from those put, even
// where bloomgate's snapshot format cannot tell (its checksums hold, or
// the damage lies past the end the decoder reads to): the object store's
// size and SHA-256 refuse it, and the instance fails open (not ready, every
// key "maybe") instead of answering from a damaged filter.
func TestJoinRefusesDamagedSnapshot(t *testing.T) {
	testsvc.Short(t, "starts a NATS cluster and PostgreSQL")
	const rows = 2000
	for _, c := range []struct {
		name   string
		damage func(snap []byte) []byte // nil: intact
	}{
		{"intact", nil},
		{"table-zeroed-checksum-recomputed", func(snap []byte) []byte {
			// Clear every bit of the Bloom filter's table and put the
			// frame's CRC-32C right: a filter the format's checks pass
			// that answers "absent" for every key.
			d := bytes.Clone(snap)
			idLen := int(binary.LittleEndian.Uint16(d[16:]))
			frame := d[18+idLen+4:]
			params := int(binary.LittleEndian.Uint32(frame[16:]))
			payload := frame[28+params : len(frame)-4]
			clear(payload)
			binary.LittleEndian.PutUint32(frame[len(frame)-4:], crc32.Checksum(frame[:len(frame)-4], crc32.MakeTable(crc32.Castagnoli)))
			return d
		}},
		{"trailing-bytes", func(snap []byte) []byte {
			return append(bytes.Clone(snap), "trailing bytes past the filter's frame"...)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ip := startInProcess(t, rows, 1<<16)
			ctx := context.Background()
			bucket := "BG_" + ip.name + "_snap"
			store := ip.set.Backend().Store
			var object string
			testsvc.Eventually(t, time.Minute, func() bool {
				names, err := store.Objects(ctx)
				if len(names) > 0 && err == nil {
					object = names[0]
				}
				return object != ""
			}, "no snapshot uploaded")
			rc, _, err := store.GetObject(ctx, object)
			if err != nil {
				t.Fatal(err)
			}
			snap, err := io.ReadAll(rc)
			rc.Close()
			if err != nil {
				t.Fatal(err)
			}
			if c.damage != nil {
				replaceChunks(t, ip.js, bucket, object, c.damage(snap))
			}

			g, err := bloomgate.New(bloomgate.Config{Source: ip.pg.Source, Capacity: 1 << 16, Logger: testLogger()})
			if err != nil {
				t.Fatal(err)
			}
			defer g.Close()
			in, err := ip.set.NewInstance(jetstream.InstanceConfig{HeadTimeout: 10 * testHeartbeat})
			if err != nil {
				t.Fatal(err)
			}
			fctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				g.Follow(fctx, in, bloomgate.FollowConfig{Identity: "users.email", Snapshots: in.Snapshots(), MaxLag: testMaxLag, SnapshotInterval: time.Hour})
				close(done)
			}()
			defer func() { cancel(); <-done }()

			keys := make([]string, rows)
			for i := range keys {
				keys[i] = fmt.Sprintf("pre%d@x", i+1)
			}
			out := make([]bool, rows)
			ready := false
			for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
				ready = ready || g.Ready()
				if n := g.MayContainStrings(keys, out); n != rows {
					t.Fatalf("%d of %d keys in the table answered absent (ready %v)", rows-n, rows, g.Ready())
				}
				if ready && c.damage == nil {
					break
				}
			}
			state, reason := g.State()
			names, _ := store.Objects(ctx)
			t.Logf("%v: %s; objects %v, damaged %s", state, reason, names, object)
			switch {
			case c.damage == nil && !ready:
				t.Fatalf("intact snapshot: the instance did not become ready (%v: %s)", state, reason)
			case c.damage != nil && ready:
				t.Fatalf("the instance became ready from a damaged snapshot (%v: %s)", state, reason)
			}
		})
	}
}
