package serve

import (
	"bytes"
	"fmt"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// dumpOf returns the key's dump.
func dumpOf(t *testing.T, s *Store, name string) []byte {
	t.Helper()
	d, err := s.Dump(name, KindBloom)
	if err != nil {
		t.Fatalf("Dump(%s): %v", name, err)
	}
	return d
}

// TestBFMAddMatchesBFAdd: BF.MADD, which adds its items in one batch,
// replies and leaves the key exactly as BF.ADD of one item after the other
// does: the same 1/0 per item (repeats within a command, items added
// before, and the false positives a command's own earlier items cause in a
// small filter at 5 %), the same stop at a full non-scaling key, the same
// BF.CARD and BF.INFO across many scale-ups, the same membership and the
// same dump; and so does the key replayed from the log after a crash.
func TestBFMAddMatchesBFAdd(t *testing.T) {
	dir := t.TempDir()
	many, err := Open(Config{DataDir: dir, Fsync: FsyncAlways}) // crashed below, never closed
	if err != nil {
		t.Fatal(err)
	}
	one := openStore(t, Config{})
	keys := map[string]BloomParams{
		"bf": {Capacity: 8, ErrorRate: 0.05, Expansion: 2},
		"ns": {Capacity: 300, ErrorRate: 0.05, NonScaling: true},
	}
	for name, p := range keys {
		for _, s := range []*Store{many, one} {
			if err := s.Reserve(name, p); err != nil {
				t.Fatal(err)
			}
		}
	}
	var all [][]byte
	id := 0
	stops := 0
	for round := range 80 {
		var batch [][]byte
		for i := range 1 + round*13%150 {
			switch {
			case i%7 == 3:
				batch = append(batch, batch[i/2]) // a repeat within the command
			case i%11 == 5 && len(all) > 0:
				batch = append(batch, all[(i*31)%len(all)]) // added before
			default:
				batch = append(batch, fmt.Appendf(nil, "item%d", id))
				id++
			}
		}
		all = append(all, batch...)
		for name := range keys {
			got, gotStop, err := many.Add(name, batch, AddOptions{NoCreate: true})
			if err != nil {
				t.Fatal(err)
			}
			var want []bool
			var wantStop error
			for _, it := range batch {
				a, stop, err := one.Add(name, [][]byte{it}, AddOptions{NoCreate: true})
				if err != nil {
					t.Fatal(err)
				}
				if stop != nil {
					wantStop = stop
					break
				}
				want = append(want, a[0])
			}
			if gotStop != wantStop || fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("round %d, %s: BF.MADD replied %v (stop %v); BF.ADD one at a time %v (stop %v)", round, name, got, gotStop, want, wantStop)
			}
			if gotStop != nil {
				stops++
			}
		}
		compareBloomKeys(t, many, one, keys, all)
	}
	if info, _ := one.bloomInfo("bf"); info.Filters < 8 || stops == 0 {
		t.Fatalf("%d sub-filters, %d stops: the test did not scale the filter up or fill the non-scaling one", info.Filters, stops)
	}
	crash(many)
	replayed := openStore(t, Config{DataDir: dir})
	compareBloomKeys(t, replayed, one, keys, all)
}

func compareBloomKeys(t *testing.T, a, b *Store, keys map[string]BloomParams, items [][]byte) {
	t.Helper()
	absent := make([][]byte, 500)
	for i := range absent {
		absent[i] = fmt.Appendf(nil, "absent%d", i)
	}
	for name := range keys {
		ca, _ := a.Cardinality(name)
		cb, _ := b.Cardinality(name)
		ia, _ := a.bloomInfo(name)
		ib, _ := b.bloomInfo(name)
		if ca != cb || ia != ib {
			t.Fatalf("%s: BF.CARD %d, BF.INFO %+v; one at a time %d, %+v", name, ca, ia, cb, ib)
		}
		for _, its := range [][][]byte{items, absent} {
			if ea, eb := held(a.MayContain(name, its)), held(b.MayContain(name, its)); fmt.Sprint(ea) != fmt.Sprint(eb) {
				t.Fatalf("%s: BF.MEXISTS differs", name)
			}
		}
		if !bytes.Equal(dumpOf(t, a, name), dumpOf(t, b, name)) {
			t.Fatalf("%s: the dumps differ", name)
		}
	}
}

// TestBFMAddSet: BF.MADD on a table-backed set replies 1 for each item
// new to its gate and 0 for a repeat within the command or an item added
// before, and every item is found at once.
func TestBFMAddSet(t *testing.T) {
	s := openStore(t, Config{Sets: []SetConfig{{Name: "users", Source: memfeed.NewSource()}}})
	for !s.Ready() {
		time.Sleep(time.Millisecond)
	}
	items := [][]byte{[]byte("a@x"), []byte("b@x"), []byte("a@x"), []byte("c@x")}
	for _, tc := range []struct {
		items [][]byte
		want  string
	}{
		{items, "[true true false true]"},
		{items[:2], "[false false]"},
	} {
		added, stop, err := s.Add("users", tc.items, AddOptions{})
		if err != nil || stop != nil || fmt.Sprint(added) != tc.want {
			t.Fatalf("Add(%q) = %v, %v, %v; want %s", tc.items, added, stop, err, tc.want)
		}
	}
	for i, ok := range held(s.MayContain("users", items)) {
		if !ok {
			t.Fatalf("false negative for %s", items[i])
		}
	}
}
