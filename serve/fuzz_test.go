package serve

import (
	"bytes"
	"os"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
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
	segs, _ := durable.Segments(dir)
	logData, _ = os.ReadFile(segs[0])
	if err := s.Close(); err != nil {
		f.Fatal(err)
	}
	snapData, _ = os.ReadFile(newestSnapshot(f, dir))
	return logData, snapData
}

// FuzzReplayLog feeds arbitrary bytes as a log segment to replay, records
// decoded and applied to a keyspace: it must never panic. (The framing on
// its own is fuzzed in package durable.)
func FuzzReplayLog(f *testing.F) {
	logData, _ := seedFiles(f)
	f.Add(logData)
	f.Add(logData[:len(logData)/2])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		s := &Store{keys: map[string]*object{}, cfg: Config{MaxFilterBytes: 1 << 20}}
		fillDefaults(&s.cfg)
		s.log = s.cfg.Logger
		durable.ReadSegment(bytes.NewReader(data), int64(len(data)), 1<<20, replayer{s}.Record)
		for _, o := range s.keys {
			o.key.mayContain(time.Now, [][]byte{[]byte("x")}, make([]bool, 1))
		}
	})
}

// readSnapshot decodes the snapshot data into keys.
func readSnapshot(data []byte, maxFilter int64, now func() time.Time) ([]*object, error) {
	r, err := durable.NewSnapshotReader(bytes.NewReader(data), int64(len(data)), maxFilter+1<<16)
	if err != nil {
		return nil, err
	}
	return loadEntries(r, maxFilter, now)
}

// FuzzReadSnapshot feeds arbitrary bytes to the snapshot decoder.
func FuzzReadSnapshot(f *testing.F) {
	_, snapData := seedFiles(f)
	f.Add(snapData)
	f.Add(snapData[:len(snapData)-3])
	f.Add([]byte("BGSNAP01"))
	f.Fuzz(func(t *testing.T, data []byte) {
		objs, err := readSnapshot(data, 1<<20, nil)
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
