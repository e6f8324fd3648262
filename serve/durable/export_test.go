package durable

// Internals for the tests of package durable_test.
var (
	AppendFrame    = appendFrame
	ReadSegmentRaw = readSegment
	NextGoodRecord = nextGoodRecord
	WriteSnapshot  = writeSnapshot
	SegmentName    = segmentName
)

const (
	SegmentMagic    = segmentMagic
	RecordHeaderLen = recordHeaderLen
	SnapshotMagic   = snapshotMagic
	DamagedSuffix   = damagedSuffix
	EndClean        = endClean
)

// Scan is what ReadSegmentRaw found.
type Scan = segmentScan

func (s Scan) Good() int64  { return s.good }
func (s Scan) Clean() bool  { return s.end == endClean }
func (s Scan) Records() int { return s.records }
