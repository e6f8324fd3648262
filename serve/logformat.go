package serve

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"github.com/bloomgate/bloomgate/internal/crc32c"
)

// Log segment format. A segment starts with the 8 bytes "BGLOG002", then
// holds records one after another, each framed as
//
//	u64 payload length | u32 CRC-32C of the payload | u32 CRC-32C of the 12 bytes before it | payload
//
// The header's own checksum tells a damaged length from a record cut short:
// a record is torn (cut short by a crash while it was being written) only
// when its header is whole and intact and the file ends before its payload
// does, or when fewer bytes than a header remain, or when everything from the
// record's start to the end of the file is zero bytes (a file system that
// extended the file before the crash but never wrote the data). Only such a
// tail, at the end of the last segment, is truncated at start; any other bad
// record is damage, and the start stops (see LogDamageError).
//
// Segments written before the header existed ("legacy", no magic) frame
// records as u64 length | u32 CRC-32C of the payload | payload; there a
// length past the end of the file cannot be told from damage and is taken
// for a torn tail, as before.
const (
	segmentMagic          = "BGLOG002"
	legacyRecordHeaderLen = 12
)

// ErrLogDamaged reports a log record that is damaged before the end of the
// log. Errors wrapping it are *LogDamageError.
var ErrLogDamaged = errors.New("serve: log is damaged")

// LogDamageError describes damage found in a log segment.
type LogDamageError struct {
	Path      string // the segment file
	Offset    int64  // where the first bad record starts
	Size      int64  // the segment's size
	Reason    string // what is wrong with the record
	LastGood  uint64 // LSN of the last good record before it (0: none)
	NextFiles int    // segments after this one
}

func (e *LogDamageError) Error() string {
	return fmt.Sprintf("serve: %s is damaged at offset %d of %d (%s), with %d bytes and %d later segment files after it; "+
		"the start is stopped so that they are not dropped: run `bloomgate serve check -data DIR` to see what a repair would lose, "+
		"then `bloomgate serve check -repair -data DIR` (it keeps a copy of every file it changes), or restore the data directory from a backup",
		e.Path, e.Offset, e.Size, e.Reason, e.Size-e.Offset, e.NextFiles)
}

func (e *LogDamageError) Unwrap() error { return ErrLogDamaged }

// segmentEnd says how a segment ends.
type segmentEnd int

const (
	endClean   segmentEnd = iota // on a whole record
	endTorn                      // with a torn record (see the format comment)
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

// frameHeader checks the frame header hdr of a record at offset off with rem
// bytes from off to the end of the file. It returns the payload length, or
// the way the file ends there.
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

// readSegment calls fn for each record of a log segment of size bytes read
// from r, and reports how the segment ends. maxRecord bounds a record's
// payload. An error from fn stops it and is returned.
func readSegment(r io.Reader, size, maxRecord int64, fn func(*record) error) (segmentScan, error) {
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
		payload := make([]byte, n)
		if _, err := io.ReadFull(br, payload); err != nil {
			return sc, fmt.Errorf("reading at offset %d: %w", off, err)
		}
		if crc32c.Checksum(payload) != binary.LittleEndian.Uint32(h[8:]) {
			sc.end, sc.reason = endDamaged, "payload checksum mismatch"
			return sc, nil
		}
		rec, err := decodePayload(payload)
		if err != nil {
			sc.end, sc.reason = endDamaged, err.Error()
			return sc, nil
		}
		if err := fn(rec); err != nil {
			return sc, err
		}
		off += int64(hlen) + n
		sc.good, sc.records, sc.lastLSN = off, sc.records+1, rec.lsn
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
// records that follow can be kept, found by their two checksums.
func nextGoodRecord(data []byte, from, maxRecord int64) int64 {
	for off := from; off+recordHeaderLen <= int64(len(data)); off++ {
		hdr := data[off : off+recordHeaderLen]
		if binary.LittleEndian.Uint32(hdr[12:]) != crc32c.Checksum(hdr[:12]) {
			continue
		}
		n := binary.LittleEndian.Uint64(hdr)
		if n > uint64(maxRecord) || n > uint64(int64(len(data))-off-recordHeaderLen) {
			continue
		}
		payload := data[off+recordHeaderLen : off+recordHeaderLen+int64(n)]
		if crc32c.Checksum(payload) != binary.LittleEndian.Uint32(hdr[8:]) {
			continue
		}
		if _, err := decodePayload(payload); err != nil {
			continue
		}
		return off
	}
	return -1
}
