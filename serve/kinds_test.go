package serve

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/serve/durable"
)

// TestReplayOtherKindsRecord: a log record of one kind's command for a key
// of another kind (a log written by hand, or by a build with a bug) is
// passed over by replay, as an opXAdd for a Bloom key always was, instead
// of reaching a filter that is not there. An opAdd or opRemove for an
// expiring key panicked in replay.
func TestReplayOtherKindsRecord(t *testing.T) {
	p := ExpiringParams{MaxTTL: time.Hour, Capacity: 100}.withDefaults()
	for _, op := range []byte{opAdd, opAddNX, opRemove} {
		dir := t.TempDir()
		writeLog(t, dir, &record{op: opCreate, name: "x", spec: p}, &record{op: op, name: "x", hashes: []uint64{1, 2}})
		s, err := Open(Config{DataDir: dir})
		if err != nil {
			t.Fatalf("op %d: %v", op, err)
		}
		if k := s.Type("x"); k != KindExpiring {
			t.Errorf("op %d: key of kind %v after replay", op, k)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

// writeLog writes a log of the records recs in dir, through the log
// itself: records no command writes.
func writeLog(t *testing.T, dir string, recs ...*record) {
	t.Helper()
	l, err := durable.Open(dir, durable.Options{MaxRecord: 1 << 20, MaxEntry: 1 << 20}, replayer{&Store{keys: map[string]*object{}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if _, _, err := l.Append(r.appendBody); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDumpRoundTripsWhole: a restored dump dumps again byte for byte, for
// every kind, counters included (a Bloom key's unused deletes field too).
func TestDumpRoundTripsWhole(t *testing.T) {
	s, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, spec := range []Spec{BloomParams{}, CuckooParams{}, ExpiringParams{MaxTTL: time.Hour, Capacity: 100}} {
		name := spec.Kind().String()
		if err := s.Reserve(name, spec); err != nil {
			t.Fatal(err)
		}
		dump, err := s.Dump(name, spec.Kind())
		if err != nil {
			t.Fatal(err)
		}
		dump = append([]byte(nil), dump...)
		// The deletes field: lsn, op, name length, an empty name, the kind
		// tag and its meta, card.
		off := 8 + 1 + 4 + 1 + spec.Kind().stored().metaLen + 8
		if spec.Kind() != KindExpiring { // there it is the fail-open time
			dump[off] = 7
		}
		copyName := name + "-copy"
		if err := s.BeginRestore(copyName, spec.Kind(), uint64(len(dump))); err != nil {
			t.Fatal(err)
		}
		if err := s.RestoreChunk(copyName, spec.Kind(), 0, dump); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		again, err := s.Dump(copyName, spec.Kind())
		if err != nil {
			t.Fatal(err)
		}
		if string(again) != string(dump) {
			t.Errorf("%s: restored dump differs", name)
		}
	}
}

// TestWriteAllocs: a write to an existing key allocates only its replies,
// not the parameters it would create the key with; into a buffer reused
// (AppendAdd, AppendMayContain), nothing.
func TestWriteAllocs(t *testing.T) {
	s, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	items := [][]byte{[]byte("a")}
	if _, _, err := s.Add("bf", items, AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Insert("cf", items, InsertOptions{}); err != nil {
		t.Fatal(err)
	}
	// Held already: Add answers (its replies); nothing is logged.
	if n := testing.AllocsPerRun(100, func() { s.Add("bf", items, AddOptions{}) }); n > 1 {
		t.Errorf("Add: %v allocations, want 1", n)
	}
	if raceEnabled {
		return // sync.Pool drops some of its items under the race detector
	}
	// A cuckoo insert: its replies only (the hashes it logs are scratch).
	fresh := make([][][]byte, 101)
	for i := range fresh {
		fresh[i] = [][]byte{{'c', byte(i)}}
	}
	i := 0
	if n := testing.AllocsPerRun(100, func() { s.Insert("cf", fresh[i], InsertOptions{}); i++ }); n > 1 {
		t.Errorf("Insert: %v allocations, want 1", n)
	}
	// Into a buffer reused, as the front ends answer BF.ADD and BF.EXISTS:
	// nothing, for an item held, a new one, or a lookup; nor does the
	// key's name, a conversion of the request's bytes, escape.
	var buf []bool
	name := []byte("bf")
	newItem := [][]byte{make([]byte, 0, 16)}
	id := 0
	for _, tc := range []struct {
		what string
		run  func()
	}{
		{"AppendAdd of an item held", func() { buf, _, _ = s.AppendAdd(buf[:0], string(name), items, AddOptions{}) }},
		{"AppendAdd of a new item", func() {
			newItem[0] = strconv.AppendInt(append(newItem[0][:0], 'n'), int64(id), 10)
			id++
			buf, _, _ = s.AppendAdd(buf[:0], string(name), newItem, AddOptions{})
			if len(buf) != 1 || !buf[0] {
				t.Fatalf("AppendAdd of new item %s = %v", newItem[0], buf)
			}
		}},
		{"AppendMayContain", func() { buf, _ = s.AppendMayContain(buf[:0], string(name), items) }},
	} {
		if n := testing.AllocsPerRun(100, tc.run); n > 0 {
			t.Errorf("%s: %v allocations, want 0", tc.what, n)
		}
	}
	// CF.ADD on a Bloom key: refused before any work.
	if n := testing.AllocsPerRun(100, func() { s.Insert("bf", items, InsertOptions{}) }); n > 0 {
		t.Errorf("Insert on a Bloom key: %v allocations, want 0", n)
	}
}

// TestAppendAnswers: AppendAdd and AppendMayContain keep dst's contents and
// append what Add and MayContain answer.
func TestAppendAnswers(t *testing.T) {
	s, err := Open(Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	items := [][]byte{[]byte("a"), []byte("b"), []byte("a")}
	prefix := []bool{true, false, true}
	added, stop, err := s.AppendAdd(slices.Clone(prefix), "bf", items, AddOptions{})
	if err != nil || stop != nil {
		t.Fatal(stop, err)
	}
	if want := append(slices.Clone(prefix), true, true, false); !slices.Equal(added, want) {
		t.Errorf("AppendAdd = %v, want %v", added, want)
	}
	probe := [][]byte{[]byte("a"), []byte("zz-not-added"), []byte("b")}
	want, kind := s.MayContain("bf", probe)
	held, hkind := s.AppendMayContain(slices.Clone(prefix), "bf", probe)
	if hkind != kind || !slices.Equal(held, append(slices.Clone(prefix), want...)) {
		t.Errorf("AppendMayContain = %v %v, want %v then %v %v", held, hkind, prefix, want, kind)
	}
	// A missing key appends false, whatever dst's spare capacity held.
	dirty := []bool{true, true, true, true}[:1]
	if held, _ := s.AppendMayContain(dirty, "missing", probe); !slices.Equal(held, []bool{true, false, false, false}) {
		t.Errorf("AppendMayContain on a missing key = %v", held)
	}
}
