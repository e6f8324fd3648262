//go:build (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm) && !purego

package filter

import (
	"sync/atomic"
	"unsafe"
)

// On little-endian machines the table's memory already is the encoding, so
// payloads are read straight into it. words_safe.go is the portable twin
// (build tag purego), tested in CI.

func (fr *frameReader) readWords(ws []uint64) {
	fr.read(unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(ws))), len(ws)*8))
}

// appendWords appends ws little-endian, loading each word atomically so a
// concurrent Add is not a data race.
func appendWords(b []byte, ws []uint64) []byte {
	n := len(b)
	b = b[:n+8*len(ws)]
	out := unsafe.Slice((*uint64)(unsafe.Pointer(&b[n])), len(ws))
	for i := range ws {
		out[i] = atomic.LoadUint64(&ws[i])
	}
	return b
}
