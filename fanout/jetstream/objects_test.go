package jetstream_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"io"
	"sync"
	"testing"
	"time"

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
