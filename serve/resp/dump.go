package resp

import (
	"encoding/binary"

	"github.com/bloomgate/bloomgate/serve"
)

// SCANDUMP/LOADCHUNK's iteration (the format is ours, not RedisBloom's; the
// iterators follow its rules): iterator 0 returns a 16-byte header,
// "BGDUMP01" then the u64 length of the dump (serve.Store.Dump), which
// follows in chunks of dumpChunk bytes. The iterator returned with a chunk
// is 1 + the offset of the chunk's end, so LOADCHUNK finds each chunk's
// offset as iterator − 1 − len(chunk), as RedisBloom's clients expect.
const (
	dumpMagic     = "BGDUMP01"
	dumpHeaderLen = 16
	dumpChunk     = 1 << 20
)

// scanDump returns the chunk of the key's dump at iterator iter and the
// iterator for the next call; next is 0 (and data nil) at the end. The dump
// is consistent only if the key is not written while it is dumped.
func scanDump(st *serve.Store, name string, kind serve.Kind, iter int64) (next int64, data []byte, err error) {
	d, err := st.Dump(name, kind)
	if err != nil {
		return 0, nil, err
	}
	if iter == 0 {
		return 1, binary.LittleEndian.AppendUint64([]byte(dumpMagic), uint64(len(d))), nil
	}
	off := iter - 1
	if off < 0 || off >= int64(len(d)) {
		return 0, nil, nil
	}
	end := min(off+dumpChunk, int64(len(d)))
	return iter + (end - off), d[off:end], nil
}

// loadChunk restores a key from scanDump's output: iterator 1 with the
// header starts a restore of a missing key (serve.ErrBadData if it exists,
// or if the header is malformed), later chunks must arrive in order, and
// the key appears once the last one is in.
func loadChunk(st *serve.Store, name string, kind serve.Kind, iter int64, data []byte) error {
	if iter == 1 {
		var size uint64 // 0, refused, for a malformed header
		if len(data) == dumpHeaderLen && string(data[:8]) == dumpMagic {
			size = binary.LittleEndian.Uint64(data[8:])
		}
		return st.BeginRestore(name, kind, size)
	}
	return st.RestoreChunk(name, kind, iter-1-int64(len(data)), data)
}
