package bloomgate_test

import (
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// BenchmarkFollowColdStart: NewFollower loading a snapshot of
// BLOOMGATE_COLD_KEYS keys (default 10 M, FP rate 0.001) from a file in the
// page cache, until the gate holds the filter (it then fails open only until
// Run has caught up with the feed).
//
//	go test . -run XXX -bench FollowColdStart -benchtime 20x
func BenchmarkFollowColdStart(b *testing.B) {
	n := 10_000_000
	if s := os.Getenv("BLOOMGATE_COLD_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	const seed = 0x5eed
	f, err := filter.NewBloom(filter.BloomConfig{Capacity: uint64(n), FPRate: 0.001, Seed: seed})
	if err != nil {
		b.Fatal(err)
	}
	for i := range n {
		f.AddHash(filter.HashString("user"+strconv.Itoa(i)+"@example.com", seed))
	}
	path := filepath.Join(b.TempDir(), "snap")
	hdr := []byte("BGS\x00\x01\x00\x00\x00")
	hdr = binary.LittleEndian.AppendUint64(hdr, 0x1_00000000)
	hdr = binary.LittleEndian.AppendUint32(hdr, crc32.Checksum(hdr, crc32.MakeTable(crc32.Castagnoli)))
	file, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	file.Write(hdr)
	size, err := f.WriteTo(file)
	if err != nil {
		b.Fatal(err)
	}
	file.Close()
	feed, err := postgres.NewFeed(postgres.FeedConfig{ConnString: "postgres://127.0.0.1/none", Table: "users", Column: "email"})
	if err != nil {
		b.Fatal(err)
	}
	defer feed.Close()
	b.SetBytes(size)
	b.ReportAllocs()
	for b.Loop() {
		g, _, err := bloomgate.NewFollower(bloomgate.Config{}, bloomgate.FollowConfig{Feed: feed, SnapshotPath: path})
		if err != nil {
			b.Fatal(err)
		}
		if _, reason := g.State(); !strings.HasPrefix(reason, "catching up from snapshot") {
			b.Fatalf("snapshot not loaded: %s", reason)
		}
		g.Close()
	}
	b.ReportMetric(float64(b.Elapsed().Microseconds())/1000/float64(b.N), "ms/start")
}
