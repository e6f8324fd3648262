package serve

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
	"github.com/bloomgate/bloomgate/serve/durable/durabletest"
)

// newestSnapshot returns the path of the newest snapshot in dir.
func newestSnapshot(t testing.TB, dir string) string {
	t.Helper()
	gens, err := durable.Snapshots(dir)
	if err != nil || len(gens) == 0 {
		t.Fatalf("no snapshot in %s: %v", dir, err)
	}
	return gens[0]
}

// fileNumber returns the number in the name of a segment or snapshot file.
func fileNumber(path string) string {
	return strings.Trim(filepath.Base(path), "abcdefghijklmnopqrstuvwxyz-.")
}

// lastSegment returns the path of the newest log segment in dir.
func lastSegment(t testing.TB, dir string) string {
	t.Helper()
	segs, err := durable.Segments(dir)
	if err != nil || len(segs) == 0 {
		t.Fatalf("no log segment in %s: %v", dir, err)
	}
	return segs[len(segs)-1]
}

func openStore(t *testing.T, cfg Config) *Store {
	t.Helper()
	s, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// crash abandons s as a crash would: no snapshot, the log file and the
// directory lock closed, the background goroutine stopped.
func crash(s *Store) {
	close(s.stop)
	s.bgDone.Wait()
	s.cancel()
	s.aof.Abandon()
}

func TestDataDirLocked(t *testing.T) {
	dir := t.TempDir()
	openStore(t, Config{DataDir: dir})
	if _, err := Open(Config{DataDir: dir}); !errors.Is(err, ErrDataDirLocked) {
		t.Fatalf("second Open of a data directory: %v, want ErrDataDirLocked", err)
	}
}

func items(prefix string, n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = fmt.Appendf(nil, "%s%d", prefix, i)
	}
	return out
}

// fill writes a mix of every durable operation.
func fill(t *testing.T, s *Store) {
	t.Helper()
	if _, _, err := s.Add("bf", items("a", 500), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Reserve("ns", BloomParams{Capacity: 10, ErrorRate: 0.01, NonScaling: true}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add("ns", items("n", 10), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Insert("cf", items("c", 300), InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, it := range items("c", 100) {
		if ok, err := s.Remove("cf", it); err != nil || !ok {
			t.Fatalf("Remove(%s) = %v, %v", it, ok, err)
		}
	}
	if _, _, err := s.Add("gone", items("g", 5), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.Delete([]string{"gone"}); n != 1 || err != nil {
		t.Fatalf("Del = %d, %v", n, err)
	}
}

// check verifies what fill wrote.
func check(t *testing.T, s *Store) {
	t.Helper()
	for i, ok := range held(s.MayContain("bf", items("a", 500))) {
		if !ok {
			t.Fatalf("bf lost a%d", i)
		}
	}
	if n, _ := s.Cardinality("bf"); n < 490 || n > 550 {
		t.Errorf("Cardinality(bf) = %d", n)
	}
	if _, stop, _ := s.Add("ns", [][]byte{[]byte("new-item-x")}, AddOptions{}); !errors.Is(stop, ErrFull) {
		t.Errorf("non-scaling filter after reload: stop = %v", stop)
	}
	for i, ok := range held(s.MayContain("cf", items("c", 300)[100:])) {
		if !ok {
			t.Fatalf("cf lost c%d", i+100)
		}
	}
	info, err := s.cuckooInfo("cf")
	if err != nil || info.Inserted != 200 || info.Deleted != 100 {
		t.Errorf("CFInfo = %+v, %v", info, err)
	}
	if s.Type("gone") != KindNone {
		t.Errorf("deleted key is back")
	}
}

func TestDurability(t *testing.T) {
	for _, fsync := range []Fsync{FsyncAlways, FsyncEverySec, FsyncNo} {
		t.Run(string(fsync), func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			cfg := Config{DataDir: dir, Fsync: fsync}

			// Log only: the store is abandoned without Close (as a crash).
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			fill(t, s)
			crash(s)
			r := openStore(t, cfg)
			check(t, r)

			// Snapshot, more writes, then reload from snapshot + log.
			if err := r.Snapshot(); err != nil {
				t.Fatal(err)
			}
			if _, _, err := r.Add("bf", items("z", 50), AddOptions{}); err != nil {
				t.Fatal(err)
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			// Two snapshot generations, and the log from the older one on.
			segs, _ := durable.Segments(dir)
			gens, _ := durable.Snapshots(dir)
			if len(gens) != 2 || len(segs) != 2 || fileNumber(segs[0]) != fileNumber(gens[1]) {
				t.Errorf("after snapshot and Close: segments %v, snapshots %v; want two of each, from the older snapshot on", segs, gens)
			}
			r2 := openStore(t, cfg)
			check(t, r2)
			for _, ok := range held(r2.MayContain("bf", items("z", 50))) {
				if !ok {
					t.Fatal("write after snapshot lost")
				}
			}
		})
	}
}

// TestReplaySkipsSnapshotted replays a log whose records the snapshot already
// holds (a crash between the snapshot's rename and the log's deletion): the
// cuckoo counts must not double.
func TestReplaySkipsSnapshotted(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, Config{DataDir: dir})
	fill(t, s)
	old, _ := durable.Segments(dir)
	data, err := os.ReadFile(old[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "log-0000000000000000.aof"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	r := openStore(t, Config{DataDir: dir})
	check(t, r)
	if n := r.Count("cf", []byte("c150")); n != 1 {
		t.Errorf("CFCount after double replay = %d, want 1", n)
	}
}

func TestTornTail(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{DataDir: dir, Fsync: FsyncAlways})
	if err != nil {
		t.Fatal(err)
	}
	fill(t, s)
	crash(s)
	durabletest.AppendFile(t, lastSegment(t, dir), []byte{200, 0, 0, 0, 0, 0, 0, 0, 1, 2}) // half a record
	var logBuf bytes.Buffer
	r := openStore(t, Config{DataDir: dir, Logger: slog.New(slog.NewTextHandler(&logBuf, nil))})
	check(t, r)
	if !strings.Contains(logBuf.String(), "incomplete record") {
		t.Errorf("no warning about the torn tail; log:\n%s", logBuf.String())
	}
}

func TestMaxMemory(t *testing.T) {
	s := openStore(t, Config{MaxMemory: 4096})
	if err := s.Reserve("big", BloomParams{Capacity: 100000, ErrorRate: 0.01}); !errors.Is(err, ErrOOM) {
		t.Fatalf("create over the limit: %v, want ErrOOM", err)
	}
	if err := s.Reserve("small", BloomParams{Capacity: 100, ErrorRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	// Grow until the limit is passed; then writes fail, reads still work.
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, _, err = s.Add("small", items(fmt.Sprint("i", i, "-"), 100), AddOptions{})
	}
	if !errors.Is(err, ErrOOM) {
		t.Fatalf("writes past the limit: %v, want ErrOOM", err)
	}
	if !held(s.MayContain("small", [][]byte{[]byte("i0-0")}))[0] {
		t.Error("read after OOM lost a key")
	}
	if n, err := s.Delete([]string{"small"}); n != 1 || err != nil || s.UsedMemory() != 0 {
		t.Errorf("Del: %d, %v; used %d", n, err, s.UsedMemory())
	}
}

func TestDumpLoad(t *testing.T) {
	s := openStore(t, Config{DataDir: t.TempDir()})
	fill(t, s)
	for _, k := range []struct {
		name string
		kind Kind
	}{{"bf", KindBloom}, {"cf", KindCuckoo}} {
		d, err := s.Dump(k.name, k.kind)
		if err != nil {
			t.Fatal(err)
		}
		copyName := k.name + "-copy"
		if err := s.BeginRestore(copyName, k.kind, uint64(len(d))); err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(d); off += 100 {
			if err := s.RestoreChunk(copyName, k.kind, int64(off), bytes.Clone(d[off:min(off+100, len(d))])); err != nil {
				t.Fatalf("RestoreChunk at %d: %v", off, err)
			}
		}
		if s.Type(copyName) != k.kind {
			t.Fatalf("restored %s has kind %v", copyName, s.Type(copyName))
		}
	}
	for _, ok := range held(s.MayContain("bf-copy", items("a", 500))) {
		if !ok {
			t.Fatal("restored Bloom lost a key")
		}
	}
	if err := s.BeginRestore("bf", KindBloom, 16); !errors.Is(err, ErrBadData) {
		t.Errorf("header onto an existing key: %v, want ErrBadData", err)
	}
}

// TestSnapshotUnderWrites takes snapshots while writers run, then reopens
// from the snapshot and log without a final snapshot: every acknowledged add
// is there, and none is applied twice (the cuckoo insert counters match).
func TestSnapshotUnderWrites(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(Config{DataDir: dir, Fsync: FsyncNo})
	if err != nil {
		t.Fatal(err)
	}
	const writers, perWriter = 4, 3000
	acked := make([][][]byte, writers)
	done := make(chan struct{})
	for w := range writers {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range perWriter {
				item := fmt.Appendf(nil, "w%d-%d", w, i)
				var err error
				if w%2 == 0 {
					_, _, err = s.Add(fmt.Sprint("bf", w), [][]byte{item}, AddOptions{})
				} else {
					var res []InsertResult
					res, _, err = s.Insert(fmt.Sprint("cf", w), [][]byte{item}, InsertOptions{})
					if err == nil && res[0] != Inserted {
						continue
					}
				}
				if err != nil {
					t.Error(err)
					return
				}
				acked[w] = append(acked[w], item)
			}
		}()
	}
	snapshots := 0
	for running := writers; running > 0; {
		select {
		case <-done:
			running--
		default:
			if err := s.Snapshot(); err != nil {
				t.Fatal(err)
			}
			snapshots++
		}
	}
	crash(s)
	r := openStore(t, Config{DataDir: dir})
	for w := range writers {
		name := fmt.Sprint("bf", w)
		res := held(r.MayContain(name, acked[w]))
		if w%2 == 1 {
			name = fmt.Sprint("cf", w)
			res = held(r.MayContain(name, acked[w]))
			info, err := r.cuckooInfo(name)
			if err != nil || info.Inserted != uint64(len(acked[w])) {
				t.Errorf("%s: %+v, %v; want %d inserted", name, info, err, len(acked[w]))
			}
		}
		for i, ok := range res {
			if !ok {
				t.Fatalf("%s lost %s", name, acked[w][i])
			}
		}
	}
	t.Logf("%d snapshots during the writes", snapshots)
}

// held is MayContain's answers, for tests that know the key's kind.
func held(b []bool, _ Kind) []bool { return b }

// expiringHeld is MayContain's answers for a name that must be an expiring
// key or missing: a key of another kind is ErrWrongType, which front ends
// answer for lookups on expiring keys.
func expiringHeld(b []bool, k Kind) ([]bool, error) {
	if k != KindExpiring && k != KindNone {
		return nil, ErrWrongType
	}
	return b, nil
}

// TestInfoAndMayContainKinds: Info and MayContain name the kind of the key
// that answered, so front ends can apply their own kind rules.
func TestInfoAndMayContainKinds(t *testing.T) {
	s := openStore(t, Config{})
	for name, spec := range map[string]Spec{
		"bf": BloomParams{Capacity: 100},
		"cf": CuckooParams{Capacity: 100},
		"x":  ExpiringParams{MaxTTL: time.Hour, Capacity: 100},
	} {
		if err := s.Reserve(name, spec); err != nil {
			t.Fatal(name, err)
		}
		info, err := s.Info(name)
		if err != nil || info.Kind != spec.Kind() {
			t.Errorf("Info(%s) = %v, %v; want kind %v", name, info.Kind, err, spec.Kind())
		}
		if _, kind := s.MayContain(name, items("a", 1)); kind != spec.Kind() {
			t.Errorf("MayContain(%s) kind %v, want %v", name, kind, spec.Kind())
		}
	}
	if info, _ := s.Info("bf"); info.Bloom.Capacity < 100 {
		t.Errorf("Info(bf).Bloom = %+v", info.Bloom)
	}
	if info, _ := s.Info("cf"); info.Cuckoo.Capacity < 100 {
		t.Errorf("Info(cf).Cuckoo = %+v", info.Cuckoo)
	}
	if info, _ := s.Info("x"); info.Expiring.Params.MaxTTL != time.Hour {
		t.Errorf("Info(x).Expiring = %+v", info.Expiring)
	}
	if _, err := s.Info("missing"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Info(missing): %v, want ErrNotFound", err)
	}
	if got, kind := s.MayContain("missing", items("a", 2)); kind != KindNone || got[0] || got[1] {
		t.Errorf("MayContain(missing) = %v, %v", got, kind)
	}
}
