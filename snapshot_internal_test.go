package bloomgate

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
)

var update = flag.Bool("update", false, "rewrite testdata/snapshot.golden")

func goldenSnapshot(t testing.TB) []byte {
	f, err := filter.NewBloom(filter.BloomConfig{Capacity: 100, FPRate: 0.01, Seed: 42})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"alice@example.com", "bob@example.com"} {
		f.AddString(k)
	}
	var b bytes.Buffer
	if err := writeSnapshot(&b, "users.email", 0x16_B374D848, f); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestSnapshotGolden pins the snapshot format: a change to it must be
// deliberate (go test -run SnapshotGolden -update).
func TestSnapshotGolden(t *testing.T) {
	path := filepath.Join("testdata", "snapshot.golden")
	got := goldenSnapshot(t)
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("snapshot encoding changed (%d bytes, golden %d); run with -update if deliberate", len(got), len(want))
	}
	f, pos, err := readSnapshot(bytes.NewReader(want), "users.email", 0)
	if err != nil || pos != 0x16_B374D848 || f.Seed() != 42 ||
		!f.MayContainHash(filter.HashString("alice@example.com", 42)) || !f.MayContainHash(filter.HashString("bob@example.com", 42)) {
		t.Fatalf("decode golden: pos %v, err %v", pos, err)
	}
	if _, _, err := readSnapshot(bytes.NewReader(want), "orders.id", 0); !errors.Is(err, ErrSnapshotMismatch) {
		t.Fatalf("other identity: %v, want ErrSnapshotMismatch", err)
	}
}

// Every truncation and every bit flip of a snapshot is an error, never a
// filter (the trailing checksum covers every byte).
func TestSnapshotDamage(t *testing.T) {
	good := goldenSnapshot(t)
	for n := range len(good) {
		if f, _, err := readSnapshot(bytes.NewReader(good[:n]), "users.email", 0); err == nil || f != nil {
			t.Fatalf("truncated to %d bytes: %v, %v", n, f, err)
		}
	}
	for i := range len(good) * 8 {
		b := bytes.Clone(good)
		b[i/8] ^= 1 << (i % 8)
		if f, _, err := readSnapshot(bytes.NewReader(b), "users.email", 0); err == nil || f != nil {
			t.Fatalf("bit %d flipped: decoded without error", i)
		}
	}
}

func FuzzReadSnapshot(f *testing.F) {
	f.Add(goldenSnapshot(f))
	f.Add([]byte("BGSNAP"))
	f.Fuzz(func(t *testing.T, b []byte) {
		flt, pos, err := readSnapshot(bytes.NewReader(b), "users.email", 1<<20)
		if err != nil {
			if flt != nil {
				t.Fatal("filter returned with an error")
			}
			return
		}
		var out bytes.Buffer
		if err := writeSnapshot(&out, "users.email", pos, flt); err != nil {
			t.Fatal(err)
		}
		if _, pos2, err := readSnapshot(&out, "users.email", 1<<20); err != nil || pos2 != pos {
			t.Fatalf("round trip: %v, %v", pos2, err)
		}
	})
}

// TestSnapshotV1Readable: snapshots written in version 1 (a trailing
// checksum over every byte) still load after the format moved to a header
// checksum and the filter's own.
func TestSnapshotV1Readable(t *testing.T) {
	old, err := os.ReadFile(filepath.Join("testdata", "snapshot_v1.golden"))
	if err != nil {
		t.Fatal(err)
	}
	f, pos, err := readSnapshot(bytes.NewReader(old), "users.email", 0)
	if err != nil || pos != 0x16_B374D848 || !f.MayContainHash(filter.HashString("alice@example.com", 42)) {
		t.Fatalf("version 1 snapshot: pos %v, err %v", pos, err)
	}
	b := bytes.Clone(old)
	b[len(b)-1] ^= 1
	if _, _, err := readSnapshot(bytes.NewReader(b), "users.email", 0); !errors.Is(err, ErrSnapshotCorrupt) {
		t.Fatalf("damaged version 1 snapshot: %v", err)
	}
}
