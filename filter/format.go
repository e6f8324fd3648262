package filter

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"math"

	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// Binary format, version 1. All integers are little-endian.
//
//	offset  size  field
//	0       4     magic "BGF\x00"
//	4       2     format version (1)
//	6       1     kind (Kind)
//	7       1     hash (hashID; 1 = XXH3-64)
//	8       8     hash seed
//	16      4     P = length of the kind's parameter block (≤ 4096)
//	20      P     parameters (per kind; Bloom: see bloomParamsLen)
//	20+P    8     L = payload length in bytes
//	28+P    L     payload (Bloom: the table as 64-bit words)
//	28+P+L  4     CRC-32C (Castagnoli) of every byte before it
//
// Readers verify every field before trusting it, never allocate more than the
// payload actually present (and DecodeConfig.MaxBytes), and check the
// checksum before returning a filter. testdata/*.golden pins the bytes.

const (
	formatVersion  = 1
	maxParamsLen   = 4096
	frameChunk     = 64 << 10
	defaultMaxSize = 64 << 30
)

var (
	formatMagic = [4]byte{'B', 'G', 'F', 0}
)

// DecodeConfig limits decoding.
type DecodeConfig struct {
	// MaxBytes is the largest payload accepted; larger input returns
	// ErrTooLarge before anything is allocated. A Windowed, whose Adds
	// create generations as keys arrive, is refused unless the payload of
	// all G generations it may hold fits, so its adds never allocate past
	// the limit either. Default (zero): 64 GiB.
	MaxBytes uint64
}

// Decode reads a filter of any kind written by a Filter's WriteTo; the
// result's dynamic type is the kind's (*Bloom, *Scalable, *Counting, *Cuckoo
// or *Windowed, which then uses time.Now as its clock). On error the Filter
// is nil.
func Decode(r io.Reader, cfg DecodeConfig) (Filter, error) {
	fr, err := openFrame(r, cfg, 0)
	if err != nil {
		return nil, err
	}
	if f := fr.kind.Family(); f != nil {
		return f.decode(fr)
	}
	return nil, fmt.Errorf("%w: unknown filter kind %d", ErrUnsupported, fr.kind)
}

// asFilter returns f as a Filter, or a nil Filter (not one holding a nil
// pointer) when err is set.
func asFilter[F Filter](f F, err error) (Filter, error) {
	if err != nil {
		return nil, err
	}
	return f, nil
}

// frameWriter writes a frame, computing the checksum on the way. The first
// error sticks and is returned by finish.
type frameWriter struct {
	w   io.Writer
	crc hash.Hash32
	n   int64
	err error
	buf []byte
}

func newFrameWriter(w io.Writer) *frameWriter {
	return &frameWriter{w: w, crc: crc32c.New(), buf: make([]byte, 0, frameChunk)}
}

func (fw *frameWriter) flush() {
	if fw.err != nil || len(fw.buf) == 0 {
		fw.buf = fw.buf[:0]
		return
	}
	fw.crc.Write(fw.buf)
	n, err := fw.w.Write(fw.buf)
	fw.n += int64(n)
	fw.err = err
	fw.buf = fw.buf[:0]
}

func (fw *frameWriter) reserve(n int) {
	if len(fw.buf)+n > cap(fw.buf) {
		fw.flush()
	}
}

func (fw *frameWriter) header(kind Kind, seed uint64, paramsLen uint32) {
	fw.buf = append(fw.buf, formatMagic[:]...)
	fw.buf = binary.LittleEndian.AppendUint16(fw.buf, formatVersion)
	fw.buf = append(fw.buf, byte(kind), byte(hashXXH3))
	fw.u64(seed)
	fw.u32(paramsLen)
}

func (fw *frameWriter) u32(v uint32) {
	fw.reserve(4)
	fw.buf = binary.LittleEndian.AppendUint32(fw.buf, v)
}

func (fw *frameWriter) u64(v uint64) {
	fw.reserve(8)
	fw.buf = binary.LittleEndian.AppendUint64(fw.buf, v)
}

// words appends ws, reading each word atomically so a concurrent Add is not a
// data race.
func (fw *frameWriter) words(ws []uint64) {
	for len(ws) > 0 && fw.err == nil {
		fw.reserve(8)
		n := min(len(ws), (cap(fw.buf)-len(fw.buf))/8)
		fw.buf = appendWords(fw.buf, ws[:n])
		ws = ws[n:]
	}
}

// Write appends p to the frame, so that a whole frame can be nested in this
// one's payload (Scalable stores its sub-filters' frames this way).
func (fw *frameWriter) Write(p []byte) (int, error) {
	n := len(p)
	for len(p) > 0 && fw.err == nil {
		fw.reserve(1)
		c := copy(fw.buf[len(fw.buf):cap(fw.buf)], p)
		fw.buf = fw.buf[:len(fw.buf)+c]
		p = p[c:]
	}
	return n - len(p), fw.err
}

func (fw *frameWriter) finish() (int64, error) {
	fw.flush()
	if fw.err != nil {
		return fw.n, fw.err
	}
	var sum [4]byte
	binary.LittleEndian.PutUint32(sum[:], fw.crc.Sum32())
	n, err := fw.w.Write(sum[:])
	fw.n += int64(n)
	return fw.n, err
}

// frameReader reads a frame, computing the checksum on the way. Field reads
// after an error return zero; the first error is kept in err.
type frameReader struct {
	r         io.Reader
	crc       uint32
	err       error
	kind      Kind
	seed      uint64
	paramsLen uint32
	maxBytes  uint64
	scratch   [8]byte
	//lint:ignore U1000 the portable twin (words_safe.go, build tag purego) stages payloads in it
	buf []byte
}

// openFrame reads and checks the fixed header. want = 0 accepts any kind.
func openFrame(r io.Reader, cfg DecodeConfig, want Kind) (*frameReader, error) {
	fr := &frameReader{r: r, maxBytes: cfg.MaxBytes}
	if fr.maxBytes == 0 {
		fr.maxBytes = defaultMaxSize
	}
	var magic [4]byte
	fr.read(magic[:])
	version := fr.u16()
	var kh [2]byte
	fr.read(kh[:])
	fr.seed = fr.u64()
	fr.paramsLen = fr.u32()
	if fr.err != nil {
		return nil, fr.err
	}
	fr.kind = Kind(kh[0])
	switch {
	case magic != formatMagic:
		return nil, fmt.Errorf("%w: not a bloomgate filter (magic %q)", ErrCorrupt, magic[:])
	case version != formatVersion:
		return nil, fmt.Errorf("%w: format version %d (this build reads %d)", ErrUnsupported, version, formatVersion)
	case hashID(kh[1]) != hashXXH3:
		return nil, fmt.Errorf("%w: hash id %d", ErrUnsupported, kh[1])
	case want != 0 && fr.kind != want:
		return nil, fmt.Errorf("%w: input is %v, want %v", ErrKindMismatch, fr.kind, want)
	case fr.paramsLen > maxParamsLen:
		return nil, fmt.Errorf("%w: parameter block of %d bytes", ErrCorrupt, fr.paramsLen)
	}
	return fr, nil
}

func (fr *frameReader) read(p []byte) {
	if fr.err != nil {
		clear(p)
		return
	}
	if _, err := io.ReadFull(fr.r, p); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			fr.err = fmt.Errorf("%w: truncated: %w", ErrCorrupt, io.ErrUnexpectedEOF)
		} else {
			fr.err = err
		}
		clear(p)
		return
	}
	fr.crc = crc32c.Update(fr.crc, p)
}

func (fr *frameReader) u16() uint16 {
	fr.read(fr.scratch[:2])
	return binary.LittleEndian.Uint16(fr.scratch[:2])
}

func (fr *frameReader) u32() uint32 {
	fr.read(fr.scratch[:4])
	return binary.LittleEndian.Uint32(fr.scratch[:4])
}

func (fr *frameReader) u64() uint64 {
	fr.read(fr.scratch[:8])
	return binary.LittleEndian.Uint64(fr.scratch[:8])
}

// words reads n little-endian words. Unless the reader reports (Len) that the
// whole payload is there, memory grows with the input actually read, so a
// header that lies about the size cannot force a huge allocation.
func (fr *frameReader) words(n uint64) ([]uint64, error) {
	if n*8 > fr.maxBytes {
		return nil, fmt.Errorf("%w: payload of %d bytes exceeds the limit of %d", ErrTooLarge, n*8, fr.maxBytes)
	}
	size := min(n, 1<<20) // 8 MiB, then doubling
	if l, ok := fr.r.(interface{ Len() int }); ok && uint64(l.Len()) >= n*8 {
		size = n
	}
	ws := make([]uint64, size)
	adviseHuge(ws, false) // before the first write faults the table in: huge pages at once
	for done := uint64(0); done < n; {
		if done == uint64(len(ws)) {
			ws = append(ws, make([]uint64, min(uint64(len(ws)), n-done))...)
		}
		c := min(uint64(len(ws))-done, 1<<13) // 64 KiB per read: checksummed while still in cache
		fr.readWords(ws[done : done+c])
		if fr.err != nil {
			return nil, fr.err
		}
		done += c
	}
	return ws, nil
}

// finish reads the checksum and compares it with what was read.
func (fr *frameReader) finish() error {
	if fr.err != nil {
		return fr.err
	}
	got := fr.crc
	var sum [4]byte
	if _, err := io.ReadFull(fr.r, sum[:]); err != nil {
		return fmt.Errorf("%w: truncated before checksum", ErrCorrupt)
	}
	if want := binary.LittleEndian.Uint32(sum[:]); want != got {
		return fmt.Errorf("%w: checksum mismatch (stored %08x, computed %08x)", ErrCorrupt, want, got)
	}
	return nil
}

// nested returns a reader of the next n bytes of fr's payload, for a frame
// stored inside it. Bytes read through it count toward fr's checksum; past n
// bytes it reports io.EOF, so a nested frame cannot read beyond its share.
func (fr *frameReader) nested(n uint64) *nestedReader { return &nestedReader{fr: fr, left: n} }

type nestedReader struct {
	fr   *frameReader
	left uint64
}

func (r *nestedReader) Read(p []byte) (int, error) {
	if r.fr.err != nil {
		return 0, r.fr.err
	}
	if r.left == 0 {
		return 0, io.EOF
	}
	if uint64(len(p)) > r.left {
		p = p[:r.left]
	}
	n, err := r.fr.r.Read(p)
	r.fr.crc = crc32c.Update(r.fr.crc, p[:n])
	r.left -= uint64(n)
	return n, err
}

// Len reports how many bytes are certainly available, so frameReader.words
// allocates a table at once only when the input holds it.
func (r *nestedReader) Len() int {
	if l, ok := r.fr.r.(interface{ Len() int }); ok {
		return int(min(uint64(max(l.Len(), 0)), r.left))
	}
	return 0
}

// blockedGeom is the parameter prefix Bloom and Counting share: capacity
// u64, false-positive rate f64, blocks u64, k u32, reserved u32 (24+8 bytes).
type blockedGeom struct {
	capacity uint64
	fpRate   float64
	blocks   uint64
	k        uint32
}

func (fw *frameWriter) geom(g blockedGeom) {
	fw.u64(g.capacity)
	fw.u64(math.Float64bits(g.fpRate))
	fw.u64(g.blocks)
	fw.u32(g.k)
	fw.u32(0)
}

// geom reads and checks a blockedGeom; check bounds the block count for the
// family's block size.
func (fr *frameReader) geom(check func(blocks uint64) error) (blockedGeom, error) {
	g := blockedGeom{capacity: fr.u64(), fpRate: math.Float64frombits(fr.u64()), blocks: fr.u64(), k: fr.u32()}
	reserved := fr.u32()
	switch {
	case fr.err != nil:
		return g, fr.err
	case g.capacity == 0:
		return g, fmt.Errorf("%w: zero capacity", ErrCorrupt)
	case !(g.fpRate > 0 && g.fpRate < 1):
		return g, fmt.Errorf("%w: false-positive rate %v", ErrCorrupt, g.fpRate)
	case g.k == 0 || g.k > maxK:
		return g, fmt.Errorf("%w: %d probes", ErrCorrupt, g.k)
	case reserved != 0:
		return g, fmt.Errorf("%w: reserved field set", ErrCorrupt)
	case g.blocks == 0:
		return g, fmt.Errorf("%w: zero blocks", ErrCorrupt)
	}
	return g, check(g.blocks)
}

// table reads the payload length and then the table of a blocked filter
// with blockWords words per block, and checks the frame's checksum.
func (fr *frameReader) table(blocks, blockWords uint64) ([]uint64, error) {
	payload := fr.u64()
	if fr.err != nil {
		return nil, fr.err
	}
	if payload != blocks*blockWords*8 {
		return nil, fmt.Errorf("%w: payload %d bytes for %d blocks", ErrCorrupt, payload, blocks)
	}
	words, err := fr.words(blocks * blockWords)
	if err != nil {
		return nil, err
	}
	return words, fr.finish()
}
