package bloomgate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"

	"github.com/bloomgate/bloomgate/changefeed"
)

// snapshotHeader encodes the header as the format comment describes it,
// independently of Follower.snapshot.
func snapshotHeader(fingerprint string, pos changefeed.Position) []byte {
	b := []byte("BGS\x00")
	b = binary.LittleEndian.AppendUint16(b, 1)
	b = binary.LittleEndian.AppendUint16(b, uint16(len(fingerprint)))
	b = append(b, fingerprint...)
	b = binary.LittleEndian.AppendUint64(b, uint64(pos))
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
}

func TestSnapshotHeader(t *testing.T) {
	h := snapshotHeader("db/users/email", 0x16_B374D848)
	if p, err := readSnapshotHeader(bytes.NewReader(h), "db/users/email"); err != nil || p != 0x16_B374D848 {
		t.Fatalf("round trip: %v, %v", p, err)
	}
	if _, err := readSnapshotHeader(bytes.NewReader(h), "other"); !errors.Is(err, ErrSnapshot) {
		t.Fatalf("foreign fingerprint: %v", err)
	}
	for i := range h {
		bad := bytes.Clone(h)
		bad[i] ^= 1
		if _, err := readSnapshotHeader(bytes.NewReader(bad), "db/users/email"); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("bit flip at %d accepted: %v", i, err)
		}
	}
	for n := range len(h) {
		if _, err := readSnapshotHeader(bytes.NewReader(h[:n]), "db/users/email"); !errors.Is(err, ErrSnapshot) {
			t.Fatalf("truncated to %d accepted: %v", n, err)
		}
	}
}

// FuzzSnapshotHeader: no input panics; an accepted header re-encodes to
// itself.
func FuzzSnapshotHeader(f *testing.F) {
	f.Add(snapshotHeader("", 1), "")
	f.Add(snapshotHeader("db/users/email", 0x16_B374D848), "db/users/email")
	f.Add([]byte("BGS\x00\x01\x00\xff\xff"), "")
	f.Fuzz(func(t *testing.T, in []byte, fp string) {
		p, err := readSnapshotHeader(bytes.NewReader(in), fp)
		if err != nil {
			if !errors.Is(err, ErrSnapshot) {
				t.Fatalf("error outside ErrSnapshot: %v", err)
			}
			return
		}
		h := snapshotHeader(fp, p)
		if !bytes.Equal(h, in[:len(h)]) {
			t.Fatalf("accepted %x, re-encodes to %x", in[:len(h)], h)
		}
	})
}
