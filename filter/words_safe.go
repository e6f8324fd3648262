//go:build !(386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm) || purego

package filter

import (
	"encoding/binary"
	"sync/atomic"
)

func (fr *frameReader) readWords(ws []uint64) {
	if fr.buf == nil {
		fr.buf = make([]byte, frameChunk)
	}
	for len(ws) > 0 && fr.err == nil {
		c := min(len(ws), frameChunk/8)
		b := fr.buf[:c*8]
		fr.read(b)
		for i := range c {
			ws[i] = binary.LittleEndian.Uint64(b[i*8:])
		}
		ws = ws[c:]
	}
}

func appendWords(b []byte, ws []uint64) []byte {
	for i := range ws {
		b = binary.LittleEndian.AppendUint64(b, atomic.LoadUint64(&ws[i]))
	}
	return b
}
