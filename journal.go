package bloomgate

import "time"

// journalSegments is how many segments one RebuildOverlap is cut into: the
// journal keeps at most one segment's span more than the overlap.
const journalSegments = 16

// journal remembers the hashes of recent adds, so a build can replay those
// whose transactions its snapshot may not see. It is cut into segments by
// time: adding appends to the newest segment and dropping old adds drops
// whole segments, so an add costs O(1) amortised. A segment's entries are
// never rewritten once appended, so a copy of the segment list can be read
// without the lock while adds go on.
//
// Memory: 8 bytes per add made within the last RebuildOverlap × 17/16
// (about 10 MB at 20,000 adds/s and the default minute).
type journal struct {
	overlap time.Duration
	span    time.Duration
	segs    []journalSegment // oldest first, from head
	head    int
	n       int // hashes held
}

type journalSegment struct {
	start  time.Time
	hashes []uint64
}

func newJournal(overlap time.Duration) journal {
	return journal{overlap: overlap, span: max(overlap/journalSegments, time.Millisecond)}
}

// add records h, added at now, and drops segments that ended more than
// overlap before now.
func (j *journal) add(now time.Time, h uint64) {
	for j.head < len(j.segs) && now.Sub(j.segs[j.head].start.Add(j.span)) > j.overlap {
		j.n -= len(j.segs[j.head].hashes)
		j.segs[j.head] = journalSegment{}
		j.head++
	}
	if j.head > 0 && j.head >= len(j.segs)/2 {
		j.segs = append(j.segs[:0], j.segs[j.head:]...)
		j.head = 0
	}
	// A clock that steps back appends to the newest segment: it is kept at
	// least as long as the entry needs.
	if last := len(j.segs) - 1; last >= j.head && now.Before(j.segs[last].start.Add(j.span)) {
		j.segs[last].hashes = append(j.segs[last].hashes, h)
	} else {
		j.segs = append(j.segs, journalSegment{start: now, hashes: append(make([]uint64, 0, 64), h)})
	}
	j.n++
}

// recent returns the segments holding the adds of the last overlap (and up to
// one span more). The result stays valid, and unchanged, after the lock is
// released.
func (j *journal) recent() []journalSegment {
	return append([]journalSegment(nil), j.segs[j.head:]...)
}
