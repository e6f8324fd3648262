package jetstream_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	js "github.com/nats-io/nats.go/jetstream"

	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// slowReader hands out its bytes in small reads with a pause after each,
// so that two uploads side by side interleave their chunks in the stream.
type slowReader struct{ r io.Reader }

func (s slowReader) Read(p []byte) (int, error) {
	time.Sleep(time.Millisecond)
	return s.r.Read(p[:min(len(p), 32<<10)])
}

// TestGetObjectInterleavedChunks: two objects put side by side have their
// chunks interleaved in the object store's stream; GetObject, which reads
// chunks ahead on the guess that they follow one another, still returns
// each object's bytes exactly.
func TestGetObjectInterleavedChunks(t *testing.T) {
	testsvc.Short(t, "starts a NATS cluster")
	j := sharedJetStream(t)
	set := openSet(t, jetstream.Config{JetStream: j, Replicas: 1, LeaseTTL: time.Second}, "o")
	name := set.Backend().Name
	ctx := context.Background()
	store := set.Backend().Store

	objects := map[string][]byte{}
	for _, o := range []string{"a", "b"} {
		data := make([]byte, 3<<20) // 24 chunks of 128 KiB
		crand.Read(data)
		objects[o] = data
	}
	var wg sync.WaitGroup
	for o, data := range objects {
		wg.Go(func() {
			if err := store.PutObject(ctx, o, slowReader{bytes.NewReader(data)}); err != nil {
				t.Errorf("PutObject %s: %v", o, err)
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	// The chunks must interleave, or this test checks nothing.
	bucket := "BG_" + name + "_snap"
	obs, err := j.ObjectStore(ctx, bucket)
	if err != nil {
		t.Fatal(err)
	}
	stream, err := j.Stream(ctx, "OBJ_"+bucket)
	if err != nil {
		t.Fatal(err)
	}
	gaps := 0
	for o := range objects {
		info, err := obs.GetInfo(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		seq, prev := uint64(1), uint64(0)
		for range info.Chunks {
			m, err := stream.GetMsg(ctx, seq, js.WithGetMsgSubject("$O."+bucket+".C."+info.NUID))
			if err != nil {
				t.Fatal(err)
			}
			if prev != 0 && m.Sequence != prev+1 {
				gaps++
			}
			prev, seq = m.Sequence, m.Sequence+1
		}
	}
	if gaps == 0 {
		t.Fatal("the two uploads did not interleave their chunks: nothing to check")
	}

	for o, data := range objects {
		rc, size, err := store.GetObject(ctx, o)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) || size != int64(len(data)) {
			t.Errorf("GetObject %s: %d bytes (size %d), equal %v, %v; want the %d put", o, len(got), size, bytes.Equal(got, data), err, len(data))
		}
	}
	t.Logf("%d gaps between the chunks of one object", gaps)
}

// TestGetObjectRefusesDamage: an object whose chunks do not add up to its
// recorded size and digest, or that lacks a chunk, is an error at the end
// of the read, never a short or altered read that ends in io.EOF.
func TestGetObjectRefusesDamage(t *testing.T) {
	testsvc.Short(t, "starts a NATS cluster")
	j := sharedJetStream(t)
	set := openSet(t, jetstream.Config{JetStream: j, Replicas: 1, LeaseTTL: time.Second}, "d")
	bucket := "BG_" + set.Backend().Name + "_snap"
	store := set.Backend().Store
	ctx := context.Background()

	chunks := make([][]byte, 5)
	var whole []byte
	for i := range chunks {
		chunks[i] = make([]byte, 100<<10)
		crand.Read(chunks[i])
		whole = append(whole, chunks[i]...)
	}
	for _, c := range []struct {
		name   string
		damage func(info *js.ObjectInfo, chunks [][]byte) [][]byte
		ok     bool
	}{
		{"intact", func(*js.ObjectInfo, [][]byte) [][]byte { return chunks }, true},
		{"byte-changed", func(_ *js.ObjectInfo, cs [][]byte) [][]byte {
			cs = slices.Clone(cs)
			cs[2] = slices.Clone(cs[2])
			cs[2][1000] ^= 1
			return cs
		}, false},
		{"size-larger", func(info *js.ObjectInfo, cs [][]byte) [][]byte { info.Size++; return cs }, false},
		{"chunk-missing", func(info *js.ObjectInfo, cs [][]byte) [][]byte { info.Chunks++; return cs }, false},
		{"last-chunk-lost", func(_ *js.ObjectInfo, cs [][]byte) [][]byte { return cs[:len(cs)-1] }, false},
		{"chunk-count-short", func(info *js.ObjectInfo, cs [][]byte) [][]byte { info.Chunks--; return cs }, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			nuid := c.name + "-nuid"
			sum := sha256.Sum256(whole)
			info := js.ObjectInfo{ObjectMeta: js.ObjectMeta{Name: c.name}, Bucket: bucket, NUID: nuid,
				Size: uint64(len(whole)), Chunks: uint32(len(chunks)), Digest: "SHA-256=" + base64.URLEncoding.EncodeToString(sum[:])}
			for _, ch := range c.damage(&info, chunks) {
				if _, err := j.Publish(ctx, "$O."+bucket+".C."+nuid, ch); err != nil {
					t.Fatal(err)
				}
			}
			m := nats.NewMsg("$O." + bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(c.name)))
			m.Header.Set(js.MsgRollup, js.MsgRollupSubject)
			m.Data, _ = json.Marshal(info)
			if _, err := j.PublishMsg(ctx, m); err != nil {
				t.Fatal(err)
			}
			rc, _, err := store.GetObject(ctx, c.name)
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			switch {
			case c.ok && (err != nil || !bytes.Equal(got, whole)):
				t.Fatalf("intact object: %d bytes, %v; want the %d put", len(got), err, len(whole))
			case !c.ok && err == nil:
				t.Fatalf("damaged object read to its end without an error (%d bytes)", len(got))
			case !c.ok:
				t.Logf("refused: %v", err)
			}
		})
	}
}
