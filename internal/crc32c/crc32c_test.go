package crc32c

import (
	"hash/crc32"
	"testing"
)

// The check value of CRC-32C ("123456789" → 0xE3069283, RFC 3720 B.4).
func TestCheckValue(t *testing.T) {
	b := []byte("123456789")
	if got := Checksum(b); got != 0xE3069283 {
		t.Fatalf("Checksum = %#x, want 0xe3069283", got)
	}
	if got := Update(Update(0, b[:4]), b[4:]); got != 0xE3069283 {
		t.Fatalf("Update in two parts = %#x", got)
	}
	h := New()
	h.Write(b)
	if got := h.Sum32(); got != 0xE3069283 || got != crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)) {
		t.Fatalf("New().Sum32 = %#x", got)
	}
}
