package crc32c

import (
	"bytes"
	"hash/crc32"
	"io"
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

func TestReader(t *testing.T) {
	br := bytes.NewReader([]byte("123456789tail"))
	r := NewReader(br)
	var p [9]byte
	if _, err := io.ReadFull(r, p[:]); err != nil {
		t.Fatal(err)
	}
	if r.Sum32() != 0xE3069283 || r.Len() != 4 {
		t.Fatalf("Sum32 %#x, Len %d", r.Sum32(), r.Len())
	}
	if NewReader(struct{ io.Reader }{br}).Len() != -1 {
		t.Fatal("Len of a reader without Len")
	}
}
