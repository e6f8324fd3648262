// Package fanout carries one change feed to many gate instances through a
// replicated log: a single feeder reads the database's feed and appends its
// transactions to the log, every instance replays the log from the position
// of a shared snapshot. This package is the engine: the feeder (Feeder) and
// the instance side (Instance), the message format and every check an
// instance makes before it applies a message. The adapters fanout/jetstream
// and fanout/redisstream only move bytes: each provides a Log, a Lease and a
// Store over its server.
//
// # Trust
//
// Anything read from the log is input, not truth. An instance applies a
// batch only if it decodes (CRC-32C), carries a valid HMAC-SHA256 when a
// Key is configured, continues exactly from the position applied, belongs
// to a lease term no older than the one before it and no newer than the
// feeder's heartbeat, and ends at or before the database head the feeder's
// heartbeat reports. Anything else is a gap: the instance fails open and
// starts again from the newest snapshot. The CRC detects damage, not a
// forger: without a Key, only the server's permissions keep others from
// writing (docs/operations.md says which).
//
// # Message format
//
// A message carries a Batch, one or more consecutive transactions of the
// feed (progress markers included), encoded by AppendBatch:
//
//	version byte (2) | flags byte (bit 0: a MAC follows the body) |
//	term uvarint | prev uvarint | count uvarint (≥ 1) | count × txn |
//	[HMAC-SHA256 (32 bytes)] | CRC-32C (Castagnoli), u32 LE
//
//	txn: commit uvarint | end uvarint | time varint (Unix ns, 0: none) |
//	     changes uvarint | changes × (kind byte | for insert and delete:
//	     key length uvarint | key)
//
// The MAC covers the byte 'B' and every byte before it; the CRC covers every
// byte before it. Prev is the End of the last transaction of the previous
// message (or the point the feeder bootstrapped at), so a consumer detects
// a missing message from the message alone. Term is the feeder's lease term
// (the fencing token), which never decreases along the log.
//
// AppendBatch, DecodeBatch and Continue are pure functions, safe for
// concurrent use; a Feeder and an Instance are safe for concurrent use.
// docs/design.md describes the engine, its trust model and its guarantees,
// docs/operations.md the NATS and Redis settings and permissions it needs.
package fanout

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// Version is the message format version AppendBatch writes and DecodeBatch
// reads.
const Version = 2

// Errors.
var (
	// ErrCorrupt reports a message DecodeBatch cannot read: damaged,
	// truncated, of another format version, or inconsistent (positions not
	// increasing, an unknown change kind).
	ErrCorrupt = errors.New("fanout: corrupt message")
	// ErrUnauthenticated reports a message, heartbeat or snapshot record
	// without a valid MAC while a Key is configured.
	ErrUnauthenticated = errors.New("fanout: message not authenticated")
	// ErrGap wraps changefeed.ErrRebuild: a message does not continue from
	// the consumer's position (a message is missing, the log was trimmed,
	// the feeder started a new history, or the message was not the
	// feeder's). The consumer must start again from a snapshot taken after
	// the gap.
	ErrGap = fmt.Errorf("fanout: gap in the log: %w", changefeed.ErrRebuild)
)

// Batch is the content of one message: consecutive transactions of the
// feed, in order, with strictly increasing End.
type Batch struct {
	// Term is the lease term of the feeder that wrote the batch.
	Term uint64
	// Prev is the feed position the batch continues from: the End of the
	// previous message's last transaction, or a bootstrap point.
	Prev changefeed.Position
	// Txns are the transactions after Prev; at least one.
	Txns []changefeed.Txn
}

// End returns the End of the batch's last transaction (Prev when empty).
func (b Batch) End() changefeed.Position {
	if len(b.Txns) == 0 {
		return b.Prev
	}
	return b.Txns[len(b.Txns)-1].End
}

const (
	flagMAC = 1 << 0
	macLen  = sha256.Size
)

// Domains of the MAC, so that one kind of value is never taken for another.
const (
	domainBatch  = 'B'
	domainHead   = 'H'
	domainRecord = 'R'
)

// seal appends the MAC (when key is set) and the CRC of dst[start:].
func seal(dst []byte, start int, domain byte, key []byte) []byte {
	if len(key) > 0 {
		m := hmac.New(sha256.New, key)
		m.Write([]byte{domain})
		m.Write(dst[start:])
		dst = m.Sum(dst)
	}
	return binary.LittleEndian.AppendUint32(dst, crc32c.Checksum(dst[start:]))
}

// open checks p's CRC and MAC and returns the body (version and flags
// first). With a key, a value without a MAC or with a wrong one is
// ErrUnauthenticated; without one, a MAC present is not checked.
func open(p []byte, domain byte, key []byte) ([]byte, error) {
	if len(p) < 2+4 {
		return nil, fmt.Errorf("%w: %d bytes", ErrCorrupt, len(p))
	}
	body := p[:len(p)-4]
	if binary.LittleEndian.Uint32(p[len(body):]) != crc32c.Checksum(body) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	if body[0] != Version {
		return nil, fmt.Errorf("%w: format version %d, this build reads %d", ErrCorrupt, body[0], Version)
	}
	hasMAC := body[1]&flagMAC != 0
	if body[1]&^flagMAC != 0 {
		return nil, fmt.Errorf("%w: unknown flags %#x", ErrCorrupt, body[1])
	}
	if hasMAC {
		if len(body) < 2+macLen {
			return nil, fmt.Errorf("%w: truncated MAC", ErrCorrupt)
		}
		mac := body[len(body)-macLen:]
		body = body[:len(body)-macLen]
		if len(key) > 0 {
			m := hmac.New(sha256.New, key)
			m.Write([]byte{domain})
			m.Write(body)
			if !hmac.Equal(m.Sum(nil), mac) {
				return nil, fmt.Errorf("%w: MAC mismatch", ErrUnauthenticated)
			}
		}
	} else if len(key) > 0 {
		return nil, fmt.Errorf("%w: no MAC", ErrUnauthenticated)
	}
	return body, nil
}

func header(dst []byte, key []byte) []byte {
	var flags byte
	if len(key) > 0 {
		flags |= flagMAC
	}
	return append(dst, Version, flags)
}

// AppendBatch appends b's encoding to dst, with a MAC when key is set. It
// fails when b has no transactions, when the positions do not strictly
// increase from Prev, when a Commit exceeds its End, or on a change of an
// unknown kind.
func AppendBatch(dst []byte, b Batch, key []byte) ([]byte, error) {
	if len(b.Txns) == 0 {
		return dst, errors.New("fanout: empty batch")
	}
	start := len(dst)
	dst = header(dst, key)
	dst = binary.AppendUvarint(dst, b.Term)
	dst = binary.AppendUvarint(dst, uint64(b.Prev))
	dst = binary.AppendUvarint(dst, uint64(len(b.Txns)))
	last := b.Prev
	for _, t := range b.Txns {
		if t.End <= last || t.Commit > t.End {
			return dst[:start], fmt.Errorf("fanout: transaction %v/%v does not follow %v", t.Commit, t.End, last)
		}
		last = t.End
		dst = binary.AppendUvarint(dst, uint64(t.Commit))
		dst = binary.AppendUvarint(dst, uint64(t.End))
		var ns int64
		if !t.Time.IsZero() {
			ns = t.Time.UnixNano()
		}
		dst = binary.AppendVarint(dst, ns)
		dst = binary.AppendUvarint(dst, uint64(len(t.Changes)))
		for _, c := range t.Changes {
			if c.Value != nil {
				// The format has no room for it: refuse rather than drop it.
				return dst[:start], errors.New("fanout: a change with a Value (a feed with a value column) cannot be fanned out")
			}
			dst = append(dst, byte(c.Kind))
			switch c.Kind {
			case changefeed.Insert, changefeed.Delete:
				dst = binary.AppendUvarint(dst, uint64(len(c.Key)))
				dst = append(dst, c.Key...)
			case changefeed.UnknownDelete, changefeed.Truncate:
			default:
				return dst[:start], fmt.Errorf("fanout: change of unknown kind %v", c.Kind)
			}
		}
	}
	return seal(dst, start, domainBatch, key), nil
}

// DecodeBatch decodes a message written by AppendBatch. With a key, a
// message without a valid MAC is an error wrapping ErrUnauthenticated. Keys
// are copied, so p may be reused. Any damage returns an error wrapping
// ErrCorrupt; no input makes it panic or allocate much more than len(p).
func DecodeBatch(p []byte, key []byte) (Batch, error) {
	body, err := open(p, domainBatch, key)
	if err != nil {
		return Batch{}, err
	}
	d := decoder{p: body[2:]}
	var b Batch
	b.Term = d.uvarint()
	b.Prev = changefeed.Position(d.uvarint())
	n := d.count(4) // a transaction takes at least 4 bytes
	if d.err == nil && n == 0 {
		d.fail("no transactions")
	}
	if d.err == nil {
		b.Txns = make([]changefeed.Txn, 0, n)
	}
	last := b.Prev
	for i := uint64(0); i < n && d.err == nil; i++ {
		var t changefeed.Txn
		t.Commit = changefeed.Position(d.uvarint())
		t.End = changefeed.Position(d.uvarint())
		if ns := d.varint(); ns != 0 {
			t.Time = time.Unix(0, ns).UTC()
		}
		if d.err == nil && (t.End <= last || t.Commit > t.End) {
			d.fail(fmt.Sprintf("transaction %v/%v does not follow %v", t.Commit, t.End, last))
		}
		last = t.End
		nc := d.count(1)
		if nc > 0 && d.err == nil {
			t.Changes = make([]changefeed.Change, 0, nc)
		}
		for j := uint64(0); j < nc && d.err == nil; j++ {
			t.Changes = append(t.Changes, d.change())
		}
		b.Txns = append(b.Txns, t)
	}
	if d.err == nil && len(d.p) != 0 {
		d.fail(fmt.Sprintf("%d trailing bytes", len(d.p)))
	}
	if d.err != nil {
		return Batch{}, d.err
	}
	return b, nil
}

type decoder struct {
	p   []byte
	err error
}

func (d *decoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, why)
	}
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.p)
	if n <= 0 {
		d.fail("bad uvarint")
		return 0
	}
	d.p = d.p[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.p)
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.p = d.p[n:]
	return v
}

// count reads an element count, each element taking at least min bytes of
// what is left, so a lying count cannot make the decoder allocate.
func (d *decoder) count(min int) uint64 {
	n := d.uvarint()
	if d.err == nil && n > uint64(len(d.p)/min) {
		d.fail(fmt.Sprintf("count %d exceeds the message", n))
		return 0
	}
	return n
}

func (d *decoder) change() changefeed.Change {
	if len(d.p) == 0 {
		d.fail("truncated change")
		return changefeed.Change{}
	}
	c := changefeed.Change{Kind: changefeed.Kind(d.p[0])}
	d.p = d.p[1:]
	switch c.Kind {
	case changefeed.Insert, changefeed.Delete:
		n := d.uvarint()
		if d.err == nil && n > uint64(len(d.p)) {
			d.fail("truncated key")
		}
		if d.err != nil {
			return c
		}
		c.Key = append(make([]byte, 0, n), d.p[:n]...)
		d.p = d.p[n:]
	case changefeed.UnknownDelete, changefeed.Truncate:
	default:
		d.fail(fmt.Sprintf("unknown change kind %d", c.Kind))
	}
	return c
}

// Continue returns the transactions of b after pos, the position a consumer
// has applied, or an error wrapping ErrGap when b does not continue from pos:
//
//   - b.Prev == pos: all of b's transactions;
//   - b.End() <= pos: none (b was applied already);
//   - b.Prev < pos < b.End(): those after the transaction ending at pos, an
//     ErrGap when no transaction of b ends at pos (pos is from another
//     history of the log, such as a bootstrap point);
//   - b.Prev > pos: ErrGap, the transactions in between are missing.
func Continue(pos changefeed.Position, b Batch) ([]changefeed.Txn, error) {
	switch {
	case b.Prev == pos:
		return b.Txns, nil
	case b.End() <= pos:
		return nil, nil
	case b.Prev > pos:
		return nil, fmt.Errorf("%w: message continues from %v, consumer is at %v", ErrGap, b.Prev, pos)
	}
	for i, t := range b.Txns {
		if t.End == pos {
			return b.Txns[i+1:], nil
		}
	}
	return nil, fmt.Errorf("%w: no transaction of the message (%v..%v) ends at %v", ErrGap, b.Prev, b.End(), pos)
}

// beatValue is the feeder's signal to instances, written every
// FeederConfig.HeartbeatInterval and as the feed delivers transactions
// (before they are batched): the lease term it
// publishes under, the newest position it knows the database has reached
// (Head: what vouches for a batch), and the database head it last read
// itself in this term (Polled, by read number Poll). Beat grows with every
// write, so a heartbeat that stops changing is stale.
//
// Only Polled says how fresh an instance is: Head may be a position the
// feeder published from its own (possibly lagging) stream, which says
// nothing of what the database holds now. Poll is 0 until the feeder has
// read the database's head in this term. Gap is how long after the first
// successful write of read Poll−1's heartbeat read Poll began (feeder
// time); negative: not known (the first read of a term, or no write of
// the previous read succeeded). Instance.heartbeat derives the read's time
// from it.
type beatValue struct {
	Term   uint64
	Head   changefeed.Position
	Beat   uint64
	Poll   uint64
	Polled changefeed.Position
	Gap    time.Duration
}

// gapUnknown encodes a negative Gap.
const gapUnknown = math.MaxUint64

// appendHeartbeat encodes h: version | flags | term u64 | head u64 |
// beat u64 | poll u64 | polled u64 | gap u64 (ns; all ones: unknown) |
// [MAC] | CRC, all little-endian.
func appendHeartbeat(dst []byte, h beatValue, key []byte) []byte {
	start := len(dst)
	dst = header(dst, key)
	dst = binary.LittleEndian.AppendUint64(dst, h.Term)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.Head))
	dst = binary.LittleEndian.AppendUint64(dst, h.Beat)
	dst = binary.LittleEndian.AppendUint64(dst, h.Poll)
	dst = binary.LittleEndian.AppendUint64(dst, uint64(h.Polled))
	gap := uint64(gapUnknown)
	if h.Gap >= 0 {
		gap = uint64(h.Gap)
	}
	dst = binary.LittleEndian.AppendUint64(dst, gap)
	return seal(dst, start, domainHead, key)
}

// heartbeatV1Len is the body of a heartbeat without a polled head (written
// by earlier feeders): it decodes with Poll 0, so it vouches for batches
// but makes no instance fresh.
const heartbeatV1Len = 2 + 24

func decodeHeartbeat(p []byte, key []byte) (beatValue, error) {
	body, err := open(p, domainHead, key)
	if err != nil {
		return beatValue{}, err
	}
	if len(body) != heartbeatV1Len && len(body) != heartbeatV1Len+24 {
		return beatValue{}, fmt.Errorf("%w: heartbeat of %d bytes", ErrCorrupt, len(body))
	}
	h := beatValue{
		Term: binary.LittleEndian.Uint64(body[2:]),
		Head: changefeed.Position(binary.LittleEndian.Uint64(body[10:])),
		Beat: binary.LittleEndian.Uint64(body[18:]),
		Gap:  -1,
	}
	if len(body) == heartbeatV1Len {
		return h, nil
	}
	h.Poll = binary.LittleEndian.Uint64(body[26:])
	h.Polled = changefeed.Position(binary.LittleEndian.Uint64(body[34:]))
	switch gap := binary.LittleEndian.Uint64(body[42:]); {
	case gap == gapUnknown:
	case gap > math.MaxInt64:
		return beatValue{}, fmt.Errorf("%w: heartbeat gap %d ns", ErrCorrupt, gap)
	default:
		h.Gap = time.Duration(gap)
	}
	if h.Poll == 0 && (h.Polled != 0 || h.Gap >= 0) {
		return beatValue{}, fmt.Errorf("%w: heartbeat with a polled head but no poll", ErrCorrupt)
	}
	return h, nil
}
