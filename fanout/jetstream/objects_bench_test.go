package jetstream_test

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/fanout/jetstream"
	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// BenchmarkGetObject: reading a snapshot-sized object (23.2 MiB, a 10 M-key
// Bloom filter's snapshot) from the object store through the set's
// fanout.Store, as an instance's join does, without the decode: the
// download's share of a join. On the shared 3-node cluster, with the
// object store at 1 and at 3 replicas (a direct get is answered by any
// replica).
func BenchmarkGetObject(b *testing.B) {
	testsvc.Short(b, "starts a NATS cluster")
	j := sharedJetStream(b)
	data := make([]byte, 23_200<<10)
	crand.Read(data)
	for _, replicas := range []int{1, 3} {
		b.Run(fmt.Sprintf("replicas=%d", replicas), func(b *testing.B) {
			set := openSet(b, jetstream.Config{JetStream: j, Replicas: replicas, LeaseTTL: time.Second}, "b")
			store := set.Backend().Store
			ctx := context.Background()
			if err := store.PutObject(ctx, "snap", bytes.NewReader(data)); err != nil {
				b.Fatal(err)
			}
			dst := make([]byte, len(data)+1)
			b.SetBytes(int64(len(data)))
			b.ResetTimer()
			for range b.N {
				rc, _, err := store.GetObject(ctx, "snap")
				if err != nil {
					b.Fatal(err)
				}
				n, err := io.ReadFull(rc, dst)
				rc.Close()
				if n != len(data) || err != io.ErrUnexpectedEOF {
					b.Fatalf("read %d bytes, %v; want %d and the end", n, err, len(data))
				}
			}
			b.StopTimer()
			if !bytes.Equal(dst[:len(data)], data) {
				b.Fatal("the object read back differs from the one put")
			}
		})
	}
}
