package filter_test

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"os"
	"path/filepath"
	"testing"
)

// checkGolden compares enc with testdata/name, rewriting it under -update.
func checkGolden(t *testing.T, name string, enc []byte) []byte {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, enc, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run Golden -update to create it)", err)
	}
	if !bytes.Equal(enc, want) {
		t.Fatalf("encoding changed; if intended, bump the format version and run -update\n got %x\nwant %x", enc, want)
	}
	return want
}

// resealTail recomputes the trailing checksum of an encoding after a test
// patched it, so the decoder's checks past the checksum are exercised.
func resealTail(b []byte) []byte {
	n := len(b) - 4
	binary.LittleEndian.PutUint32(b[n:], crc32.Checksum(b[:n], crc32.MakeTable(crc32.Castagnoli)))
	return b
}
