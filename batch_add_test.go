package bloomgate

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/memfeed"
)

// TestAddManyMatchesAdd: AddMany answers, adds and counts exactly as a
// MayContain and then an Add per key, one after the other (what BF.MADD on
// a table-backed set did): two gates with one seed, one fed each way, give
// the same "was absent" answers, stop at the same key with the same error,
// and end with the same filter, state and counters. A small filter at 5 %
// makes false positives caused by a batch's own earlier keys common;
// batches repeat keys, hold keys of the table, keys a normaliser folds
// together and an over-long key; the cuckoo filter fills up and refuses
// keys; the first batches come before the gates are warm.
func TestAddManyMatchesAdd(t *testing.T) {
	rows := make([][]byte, 40)
	for i := range rows {
		rows[i] = fmt.Appendf(nil, "row%d@example.com", i)
	}
	table := memfeed.NewSourceBytes(rows)
	kinds := map[string]func(uint64, float64, uint64) (Filter, error){
		"bloom":  NewBloom,
		"cuckoo": NewCuckoo,
	}
	for kind, nf := range kinds {
		for _, norm := range []Normalizer{Exact, LowerTrim} {
			t.Run(fmt.Sprintf("%s/%v", kind, norm.kind), func(t *testing.T) {
				cfg := Config{Source: table, Capacity: 400, FPRate: 0.05, MaxKeyLen: 40, Normalizer: norm, NewFilter: nf}
				one, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer one.Close()
				many, err := New(cfg)
				if err != nil {
					t.Fatal(err)
				}
				defer many.Close()
				many.seed = one.seed
				id := 0
				for round := range 60 {
					if round == 3 {
						for _, g := range []*Gate{one, many} {
							if err := g.Warm(context.Background()); err != nil {
								t.Fatal(err)
							}
						}
					}
					var batch [][]byte
					for i := range 1 + round*7%300 {
						switch {
						case i%11 == 5:
							batch = append(batch, batch[i/2]) // a repeat within the batch
						case i%13 == 7:
							batch = append(batch, rows[i%len(rows)])
						case i%17 == 3:
							batch = append(batch, []byte(" USER"+fmt.Sprint(id-1)+"@Example.com"))
						case round%9 == 8 && i == 100:
							batch = append(batch, []byte(strings.Repeat("x", 41)))
						default:
							batch = append(batch, fmt.Appendf(nil, "user%d@example.com", id))
							id++
						}
					}
					var want []bool
					var wantErr error
					for _, k := range batch {
						was := one.MayContain(k)
						if wantErr = one.Add(k); wantErr != nil {
							break
						}
						want = append(want, !was)
					}
					fresh := make([]bool, len(batch))
					n, err := many.AddMany(batch, fresh)
					if n != len(want) || fmt.Sprint(err) != fmt.Sprint(wantErr) {
						t.Fatalf("round %d: AddMany added %d, %v; one at a time %d, %v", round, n, err, len(want), wantErr)
					}
					for i := range want {
						if fresh[i] != want[i] {
							t.Fatalf("round %d: key %d (%s) fresh=%v, one at a time %v", round, i, batch[i], fresh[i], want[i])
						}
					}
					s1, s2 := one.Stats(), many.Stats()
					s1.Filter, s2.Filter = filter.Stats{}, filter.Stats{}
					if s1 != s2 {
						t.Fatalf("round %d: stats differ:\n one at a time %+v\n AddMany       %+v", round, s1, s2)
					}
				}
				v1, v2 := one.view.Load(), many.view.Load()
				if v1.f.Stats() != v2.f.Stats() {
					t.Fatalf("filters differ: %+v, %+v", v1.f.Stats(), v2.f.Stats())
				}
				if kind == "bloom" {
					var b1, b2 bytes.Buffer
					v1.bloom.WriteTo(&b1)
					v2.bloom.WriteTo(&b2)
					if !bytes.Equal(b1.Bytes(), b2.Bytes()) {
						t.Fatal("the Bloom filters encode differently")
					}
				}
				for i := range id {
					k := fmt.Appendf(nil, "user%d@example.com", i)
					if one.MayContain(k) != many.MayContain(k) {
						t.Fatalf("%s: MayContain differs", k)
					}
				}
			})
		}
	}
}

func TestAddManyAfterClose(t *testing.T) {
	g, err := New(Config{Source: memfeed.NewSource(), MaxKeyLen: 8})
	if err != nil {
		t.Fatal(err)
	}
	g.Close()
	for _, tc := range []struct {
		keys [][]byte
		want error
	}{
		{[][]byte{[]byte("a")}, ErrClosed},
		{[][]byte{[]byte("too long a key")}, ErrKeyTooLong},
	} {
		n, err1 := g.AddMany(tc.keys, nil)
		err2 := g.Add(tc.keys[0])
		if n != 0 || fmt.Sprint(err1) != fmt.Sprint(err2) {
			t.Errorf("AddMany(%q) after Close = %d, %v; Add: %v", tc.keys[0], n, err1, err2)
		}
	}
}
