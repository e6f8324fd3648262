package serve

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// seedFiles returns a log segment and a snapshot written by fill.
func seedFiles(f *testing.F) (logData, snapData []byte) {
	dir := f.TempDir()
	s, err := Open(Config{DataDir: dir})
	if err != nil {
		f.Fatal(err)
	}
	if _, _, err := s.Add("bf", items("a", 20), AddOptions{}); err != nil {
		f.Fatal(err)
	}
	if _, _, err := s.Insert("cf", items("c", 20), InsertOptions{}); err != nil {
		f.Fatal(err)
	}
	s.Remove("cf", []byte("c1"))
	s.Delete([]string{"bf"})
	segs, _ := listSegments(dir)
	logData, _ = os.ReadFile(filepath.Join(dir, segmentName(segs[0])))
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	snapData, _ = os.ReadFile(newestSnapshot(f, dir))
	return logData, snapData
}

// FuzzReadRecords feeds arbitrary bytes to the log decoder: it must never
// panic and never read past the size it is given.
func FuzzReadRecords(f *testing.F) {
	logData, _ := seedFiles(f)
	f.Add(logData)
	f.Add(logData[:len(logData)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &Store{keys: map[string]*object{}, cfg: Config{MaxFilterBytes: 1 << 20}}
		fillDefaults(&s.cfg)
		s.log = s.cfg.Logger
		sc, err := readSegment(bytes.NewReader(data), int64(len(data)), 1<<20, s.apply)
		if err == nil && (sc.good > int64(len(data)) || (sc.end == endClean) != (sc.good == int64(len(data)))) {
			t.Fatalf("good offset %d of %d bytes, end %v", sc.good, len(data), sc.end)
		}
		if next := nextGoodRecord(data, 0, 1<<20); next > int64(len(data)) {
			t.Fatalf("next good record at %d past %d bytes", next, len(data))
		}
	})
}

// FuzzReadSnapshot feeds arbitrary bytes to the snapshot decoder.
func FuzzReadSnapshot(f *testing.F) {
	_, snapData := seedFiles(f)
	f.Add(snapData)
	f.Add(snapData[:len(snapData)-3])
	f.Add([]byte(snapshotMagic))
	f.Fuzz(func(t *testing.T, data []byte) {
		_, objs, err := readSnapshot(bytes.NewReader(data), int64(len(data)), 1<<20, nil)
		if err == nil {
			for _, o := range objs {
				o.key.mayContain(time.Now, [][]byte{[]byte("x")}, make([]bool, 1))
			}
		}
	})
}

// FuzzDecodePayload covers the record payload decoder on its own, as
// LOADCHUNK feeds it client bytes.
func FuzzDecodePayload(f *testing.F) {
	f.Add((&record{op: opCreate, name: "k", spec: BloomParams{Capacity: 10, ErrorRate: 0.01, Expansion: 2}}).appendPayload(nil))
	f.Add((&record{op: opAdd, name: "k", hashes: []uint64{1, 2}}).appendPayload(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodePayload(data)
		if err == nil && r.op == opPut {
			objectFromPut(r, 1<<20, nil)
		}
	})
}
