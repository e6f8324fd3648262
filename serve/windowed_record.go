package serve

import (
	"encoding/binary"
	"fmt"
	"math"
	"time"
)

// The expiring key's part of the record encoding (see record.go), little-
// endian. Its meta, after the kind byte:
//
//	u8 version (1) | u64 capacity | f64 error rate | i64 max TTL (ns) | u32 generations
//
// and the body of opXAdd:
//
//	i64 expiry (Unix ns) | u32 n | n × u64 key hash (filter.Hash, seed 0)
//
// The version byte lets a later layout be told apart; a reader refuses a
// version it does not know.
const (
	expiringMetaVersion = 1
	expiringMetaLen     = 1 + 8 + 8 + 8 + 4
)

func (p ExpiringParams) appendMeta(b []byte) []byte {
	b = append(b, expiringMetaVersion)
	b = binary.LittleEndian.AppendUint64(b, p.Capacity)
	b = binary.LittleEndian.AppendUint64(b, math.Float64bits(p.ErrorRate))
	b = binary.LittleEndian.AppendUint64(b, uint64(p.MaxTTL))
	return binary.LittleEndian.AppendUint32(b, uint32(p.Generations))
}

func decodeExpiringSpec(d *decoder) Spec {
	if d.u8() != expiringMetaVersion {
		d.bad = true
	}
	var p ExpiringParams
	p.Capacity = d.u64()
	p.ErrorRate = math.Float64frombits(d.u64())
	p.MaxTTL = time.Duration(d.u64())
	g := d.u32()
	if g > maxExpiringGenerations {
		d.bad = true
	}
	p.Generations = int(g)
	return p
}

func appendXAdd(b []byte, r *record) []byte {
	b = binary.LittleEndian.AppendUint64(b, uint64(r.expiry))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(r.hashes)))
	for _, h := range r.hashes {
		b = binary.LittleEndian.AppendUint64(b, h)
	}
	return b
}

func (d *decoder) xadd(r *record) error {
	r.expiry = int64(d.u64())
	n := uint64(d.u32())
	if n > uint64(len(d.b))/8 {
		return fmt.Errorf("%w: %d hashes in %d bytes", errBadRecord, n, len(d.b))
	}
	r.hashes = make([]uint64, n)
	for i := range r.hashes {
		r.hashes[i] = d.u64()
	}
	return nil
}
