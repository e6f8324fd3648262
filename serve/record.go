package serve

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
)

// Log records, snapshot entries and dumps share one encoding, little-endian:
//
//	u64 lsn | u8 op | u32 name length | name | args
//
// In the log, package durable frames and numbers each record and holds the
// u64 lsn; what follows it is the record's body, this package's. The args
// by op:
//
//	opCreate  meta
//	opAdd     u32 n | n × u64 key hash (filter.Hash, the filter's seed)
//	opRemove  u32 n | n × u64 key hash
//	opAddNX   u32 n | n × u64 key hash
//	opDel     (empty)
//	opPut     meta | u64 card | u64 deletes | the filter (its WriteTo format);
//	          for an expiring key, deletes is the Unix ns until which it
//	          answers "present" to every lookup (0: none; see replayXAdd)
//	opXAdd    i64 expiry (Unix ns) | u32 n | n × u64 key hash (an expiring key)
//
// and meta:
//
//	u8 kind | Bloom:  u64 capacity | f64 error rate | u32 expansion | u8 non-scaling
//	        | cuckoo: u64 capacity | u32 bucket size | u32 max iterations | u32 expansion | u8 no-expansion
//	        | expiring: see expiringMeta in windowed_record.go
//
// A snapshot entry is an opPut record (see snapshot.go); a dump is one
// with an empty name and lsn 0 (see dump.go).
//
// Replay applies a record with the same rules as the command that wrote it,
// and those rules are deterministic (a cuckoo insert that failed fails again
// on the same table), so a record says what a command tried, not only what
// it changed: opAdd lists the hashes a command tried to add (a Bloom filter
// skips those it already holds, a cuckoo filter inserts each, and one that
// does not fit fails as it did), opAddNX the same with CF.ADDNX's rule (a
// hash the filter may hold is skipped), opRemove the hashes to remove.
//
// New ops take new numbers; a reader that meets an op it does not know
// reports the record as malformed, never skips it.
const (
	opCreate byte = 1
	opAdd    byte = 2
	opRemove byte = 3
	opDel    byte = 4
	opPut    byte = 5
	opAddNX  byte = 6
	opXAdd   byte = 7
)

// errBadRecord reports a record that does not decode. It wraps
// durable.ErrMalformed, so a log record that does not decode counts as
// damage to the log.
var errBadRecord = fmt.Errorf("serve: %w", durable.ErrMalformed)

type record struct {
	lsn    uint64
	op     byte
	name   string
	spec   Spec // opCreate, opPut
	hashes []uint64
	// opPut
	card, deletes uint64
	filter        []byte
	// opXAdd: the items' expiry, Unix ns
	expiry int64
}

// appendPayload appends r whole: its lsn, then its body.
func (r *record) appendPayload(b []byte) []byte {
	return r.appendBody(binary.LittleEndian.AppendUint64(b, r.lsn))
}

// appendBody appends r after its lsn: what a log record holds after the
// LSN durable.Log.Append gives it.
func (r *record) appendBody(b []byte) []byte {
	b = append(b, r.op)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.name)))
	b = append(b, r.name...)
	switch r.op {
	case opCreate:
		b = appendMeta(b, r.spec)
	case opAdd, opAddNX, opRemove:
		b = binary.LittleEndian.AppendUint32(b, uint32(len(r.hashes)))
		for _, h := range r.hashes {
			b = binary.LittleEndian.AppendUint64(b, h)
		}
	case opPut:
		b = appendMeta(b, r.spec)
		b = binary.LittleEndian.AppendUint64(b, r.card)
		b = binary.LittleEndian.AppendUint64(b, r.deletes)
		b = append(b, r.filter...)
	case opXAdd:
		b = appendXAdd(b, r)
	}
	return b
}

// appendMeta appends a key's meta: its kind's tag, then its parameters.
func appendMeta(b []byte, spec Spec) []byte {
	return spec.appendMeta(append(b, byte(spec.Kind())))
}

func (p BloomParams) appendMeta(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, p.Capacity)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.ErrorRate))
	b = binary.LittleEndian.AppendUint32(b, p.Expansion)
	return append(b, boolByte(p.NonScaling))
}

func (p CuckooParams) appendMeta(b []byte) []byte {
	b = binary.LittleEndian.AppendUint64(b, p.Capacity)
	b = binary.LittleEndian.AppendUint32(b, uint32(p.BucketSize))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.MaxIterations))
	b = binary.LittleEndian.AppendUint32(b, uint32(p.Expansion))
	return append(b, boolByte(p.NoExpansion))
}

func boolByte(v bool) byte {
	if v {
		return 1
	}
	return 0
}

// decoder reads little-endian fields and remembers the first shortfall.
type decoder struct {
	b   []byte
	bad bool
}

func (d *decoder) take(n uint64) []byte {
	if d.bad || n > uint64(len(d.b)) {
		d.bad = true
		return nil
	}
	out := d.b[:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) u8() byte {
	if b := d.take(1); b != nil {
		return b[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if b := d.take(4); b != nil {
		return binary.LittleEndian.Uint32(b)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if b := d.take(8); b != nil {
		return binary.LittleEndian.Uint64(b)
	}
	return 0
}

// decodePayload decodes a record whole (lsn and body).
func decodePayload(b []byte) (*record, error) {
	d := &decoder{b: b}
	return d.record(d.u64())
}

// decodeBody decodes the body of the log record lsn.
func decodeBody(lsn uint64, body []byte) (*record, error) {
	d := &decoder{b: body}
	return d.record(lsn)
}

// record decodes a record's body, with the lsn read before it. It validates
// parameters, so a decoded create or put can be built without surprises.
func (d *decoder) record(lsn uint64) (*record, error) {
	r := &record{lsn: lsn, op: d.u8()}
	r.name = string(d.take(uint64(d.u32())))
	switch r.op {
	case opCreate:
		r.spec = d.meta()
	case opAdd, opAddNX, opRemove:
		n := uint64(d.u32())
		if n > uint64(len(d.b))/8 {
			return nil, fmt.Errorf("%w: %d hashes in %d bytes", errBadRecord, n, len(d.b))
		}
		r.hashes = make([]uint64, n)
		for i := range r.hashes {
			r.hashes[i] = d.u64()
		}
	case opDel:
	case opPut:
		r.spec = d.meta()
		r.card = d.u64()
		r.deletes = d.u64()
		r.filter = d.b
		d.b = nil
	case opXAdd:
		if err := d.xadd(r); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: unknown op %d", errBadRecord, r.op)
	}
	if d.bad {
		return nil, fmt.Errorf("%w: truncated", errBadRecord)
	}
	if len(d.b) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadRecord, len(d.b))
	}
	if r.op == opCreate || r.op == opPut {
		if err := r.spec.check(); err != nil {
			return nil, fmt.Errorf("%w: %v", errBadRecord, err)
		}
	}
	return r, nil
}

// meta reads a key's meta; nil (and d.bad) for a tag no stored kind has.
func (d *decoder) meta() Spec {
	kk := Kind(d.u8()).stored()
	if kk == nil {
		d.bad = true
		return nil
	}
	return kk.decodeSpec(d)
}

func decodeBloomSpec(d *decoder) Spec {
	var p BloomParams
	p.Capacity = d.u64()
	p.ErrorRate = math.Float64frombits(d.u64())
	p.Expansion = d.u32()
	p.NonScaling = d.u8() != 0
	if !p.NonScaling && p.Expansion == 0 {
		d.bad = true
	}
	return p
}

func decodeCuckooSpec(d *decoder) Spec {
	var p CuckooParams
	p.Capacity = d.u64()
	p.BucketSize = int(d.u32())
	p.MaxIterations = int(d.u32())
	p.Expansion = int(d.u32())
	p.NoExpansion = d.u8() != 0
	return p
}

// encodeFilter returns o's filter in its binary format. Call with o.mu held.
func (o *object) encodeFilter() ([]byte, error) {
	var buf bytes.Buffer
	err := o.writeFilter(&buf)
	return buf.Bytes(), err
}

// writeFilter writes o's filter in its binary format. Call with o.mu held.
func (o *object) writeFilter(w io.Writer) error { return o.key.writeFilter(w) }

// putRecord returns a record that recreates o as it is. Call with o.mu held.
func (o *object) putRecord() (*record, error) {
	data, err := o.encodeFilter()
	if err != nil {
		return nil, err
	}
	r := o.putHead()
	r.filter = data
	return r, nil
}

// putHead returns o's opPut record without its filter. Call with o.mu held.
func (o *object) putHead() *record {
	r := &record{lsn: o.lsn, op: opPut, name: o.name, spec: o.key.spec()}
	r.card, r.deletes = o.key.counters()
	return r
}

// objectFromPut decodes the filter of an opPut record; now is an expiring
// key's clock.
func objectFromPut(r *record, maxBytes int64, now func() time.Time) (*object, error) {
	rd := bytes.NewReader(r.filter)
	o, err := decodeKey(r, rd, maxBytes, now)
	if err == nil && rd.Len() != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the filter", errBadRecord, rd.Len())
	}
	return o, err
}
