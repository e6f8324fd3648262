package durable

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// The record framing (see the package doc).
const (
	segmentMagic          = "BGLOG002"
	recordHeaderLen       = 16 // u64 length | u32 payload CRC | u32 header CRC
	legacyRecordHeaderLen = 12 // u64 length | u32 payload CRC
	lsnLen                = 8  // the payload's u64 LSN before the body
)

// appendFrame appends a framed record of LSN lsn whose body body appends.
func appendFrame(dst []byte, lsn uint64, body func([]byte) []byte) []byte {
	start := len(dst)
	dst = append(dst, make([]byte, recordHeaderLen)...)
	dst = binary.LittleEndian.AppendUint64(dst, lsn)
	dst = body(dst)
	payload := dst[start+recordHeaderLen:]
	binary.LittleEndian.PutUint64(dst[start:], uint64(len(payload)))
	binary.LittleEndian.PutUint32(dst[start+8:], crc32c.Checksum(payload))
	binary.LittleEndian.PutUint32(dst[start+12:], crc32c.Checksum(dst[start:start+12]))
	return dst
}

// RecordFunc receives a record read back: its LSN and its body, which the
// function may keep. An error wrapping ErrMalformed says the body does not
// decode, and the record counts as damage; any other error stops the read
// and is returned.
type RecordFunc func(lsn uint64, body []byte) error

// segmentEnd says how a segment ends.
type segmentEnd int

const (
	endClean   segmentEnd = iota // on a whole record
	endTorn                      // with a torn record (see the package doc)
	endDamaged                   // with a damaged record before its end
)

func (e segmentEnd) String() string {
	switch e {
	case endTorn:
		return "torn"
	case endDamaged:
		return "damaged"
	}
	return "clean"
}

// segmentScan is what reading a segment found.
type segmentScan struct {
	size    int64
	legacy  bool
	good    int64 // offset after the last good record
	end     segmentEnd
	reason  string // for endTorn and endDamaged
	records int
	lastLSN uint64
}

// frameHeader checks the frame header hdr of a record with rem bytes from
// its start to the end of the file. It returns the payload length, or the
// way the file ends there.
func frameHeader(hdr []byte, rem, maxRecord int64, legacy bool) (n int64, end segmentEnd, reason string) {
	hlen := int64(recordHeaderLen)
	if legacy {
		hlen = legacyRecordHeaderLen
	}
	if rem < hlen {
		return 0, endTorn, fmt.Sprintf("%d bytes left, less than a record header", rem)
	}
	if !legacy && binary.LittleEndian.Uint32(hdr[12:]) != crc32c.Checksum(hdr[:12]) {
		return 0, endDamaged, "record header checksum mismatch"
	}
	un := binary.LittleEndian.Uint64(hdr)
	if un > uint64(rem-hlen) {
		if legacy || un <= uint64(maxRecord) {
			return 0, endTorn, fmt.Sprintf("record of %d bytes ends past the end of the file", un)
		}
	}
	if un > uint64(maxRecord) {
		return 0, endDamaged, fmt.Sprintf("record length %d over the limit", un)
	}
	return int64(un), endClean, ""
}

// payload splits a record's payload into its LSN and body and hands them to
// fn. It returns the reason the record is damaged, or "" (and fn's error
// when it is not ErrMalformed).
func payload(p []byte, fn RecordFunc) (lsn uint64, reason string, err error) {
	if len(p) < lsnLen {
		return 0, fmt.Sprintf("record of %d bytes, shorter than its LSN", len(p)), nil
	}
	lsn = binary.LittleEndian.Uint64(p)
	if err := fn(lsn, p[lsnLen:]); err != nil {
		if errors.Is(err, ErrMalformed) {
			return lsn, err.Error(), nil
		}
		return lsn, "", err
	}
	return lsn, "", nil
}

// readSegment calls fn for each record of a log segment of size bytes read
// from r, and reports how the segment ends. maxRecord bounds a record's
// payload. An error from fn other than ErrMalformed stops it and is
// returned.
func readSegment(r io.Reader, size, maxRecord int64, fn RecordFunc) (segmentScan, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	sc := segmentScan{size: size}
	var off int64
	if size == 0 {
		return sc, nil
	}
	magic, _ := br.Peek(len(segmentMagic))
	switch {
	case string(magic) == segmentMagic:
		br.Discard(len(segmentMagic))
		off = int64(len(segmentMagic))
	case size < int64(len(segmentMagic)) && string(magic) == segmentMagic[:len(magic)]:
		sc.end, sc.reason = endTorn, "segment header cut short"
		return sc, nil
	default:
		sc.legacy = true
	}
	sc.good = off
	hlen := recordHeaderLen
	if sc.legacy {
		hlen = legacyRecordHeaderLen
	}
	hdr := make([]byte, recordHeaderLen)
	for off < size {
		rem := size - off
		h := hdr[:min(int64(hlen), rem)]
		if _, err := io.ReadFull(br, h); err != nil {
			return sc, fmt.Errorf("reading at offset %d: %w", off, err)
		}
		n, end, reason := frameHeader(h, rem, maxRecord, sc.legacy)
		if end == endDamaged && allZero(h) {
			if zero, err := restIsZero(br); err != nil {
				return sc, err
			} else if zero {
				end, reason = endTorn, "zero bytes to the end of the file"
			}
		}
		if end != endClean {
			sc.end, sc.reason = end, reason
			return sc, nil
		}
		p := make([]byte, n)
		if _, err := io.ReadFull(br, p); err != nil {
			return sc, fmt.Errorf("reading at offset %d: %w", off, err)
		}
		if crc32c.Checksum(p) != binary.LittleEndian.Uint32(h[8:]) {
			sc.end, sc.reason = endDamaged, "payload checksum mismatch"
			return sc, nil
		}
		lsn, reason, err := payload(p, fn)
		if err != nil {
			return sc, err
		}
		if reason != "" {
			sc.end, sc.reason = endDamaged, reason
			return sc, nil
		}
		off += int64(hlen) + n
		sc.good, sc.records, sc.lastLSN = off, sc.records+1, lsn
	}
	return sc, nil
}

func allZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// restIsZero reports whether everything left in r is zero bytes.
func restIsZero(r io.Reader) (bool, error) {
	buf := make([]byte, 1<<16)
	for {
		n, err := r.Read(buf)
		if !allZero(buf[:n]) {
			return false, nil
		}
		if err == io.EOF {
			return true, nil
		}
		if err != nil {
			return false, err
		}
	}
}

// nextGoodRecord returns the offset of the first whole, intact record of a
// current-format segment found after from in data, or -1: after damage the
// records that follow can be kept, found by their two checksums (and valid
// saying their body decodes).
func nextGoodRecord(data []byte, from, maxRecord int64, valid RecordFunc) int64 {
	for off := from; off+recordHeaderLen <= int64(len(data)); off++ {
		hdr := data[off : off+recordHeaderLen]
		if binary.LittleEndian.Uint32(hdr[12:]) != crc32c.Checksum(hdr[:12]) {
			continue
		}
		n := binary.LittleEndian.Uint64(hdr)
		if n > uint64(maxRecord) || n > uint64(int64(len(data))-off-recordHeaderLen) {
			continue
		}
		p := data[off+recordHeaderLen : off+recordHeaderLen+int64(n)]
		if crc32c.Checksum(p) != binary.LittleEndian.Uint32(hdr[8:]) {
			continue
		}
		if _, reason, err := payload(p, valid); reason != "" || err != nil {
			continue
		}
		return off
	}
	return -1
}

// ReadSegment reads the records of one log segment, size bytes from r,
// through fn. It returns nil when the segment ends on a whole record, and
// otherwise a *LogDamageError (without Path and NextFiles) saying where
// and why it stopped: a record cut short by a crash too, which only Open,
// at the end of the last segment, takes for harmless. An error from fn
// other than ErrMalformed is returned as it is.
func ReadSegment(r io.Reader, size, maxRecord int64, fn RecordFunc) error {
	sc, err := readSegment(r, size, maxRecord, fn)
	if err != nil {
		return err
	}
	if sc.end != endClean {
		return &LogDamageError{Offset: sc.good, Size: size, Reason: sc.end.String() + ": " + sc.reason, LastGood: sc.lastLSN}
	}
	return nil
}
