package serve

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/serve/durable"
)

var update = flag.Bool("update", false, "rewrite golden files in testdata/")

// fakeClock is a clock tests move by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock() *fakeClock {
	c := &fakeClock{}
	c.ns.Store(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

func xparams(maxTTL time.Duration, capacity uint64) ExpiringParams {
	return ExpiringParams{MaxTTL: maxTTL, Capacity: capacity, ErrorRate: 0.001}
}

func mustXAdd(t testing.TB, s *Store, name string, exp time.Time, its ...[]byte) {
	t.Helper()
	if _, err := s.AddUntil(name, its, exp); err != nil {
		t.Fatalf("XAdd(%s, %d items, %v): %v", name, len(its), exp, err)
	}
}

func TestExpiringErrors(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Config{Now: clock.Now})
	now := clock.Now()
	if err := s.Reserve("x", xparams(time.Hour, 1000)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Add("bf", items("b", 1), AddOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name string
		err  error
		want error
	}{
		{"reserve twice", s.Reserve("x", xparams(time.Hour, 1000)), ErrExists},
		{"reserve over a bloom key", s.Reserve("bf", xparams(time.Hour, 1000)), ErrWrongType},
		{"no max TTL", s.Reserve("y", xparams(0, 1000)), nil},
		{"no capacity", s.Reserve("y", xparams(time.Hour, 0)), nil},
		{"one generation", s.Reserve("y", ExpiringParams{MaxTTL: time.Hour, Capacity: 10, Generations: 1}), nil},
		{"too large", s.Reserve("y", ExpiringParams{MaxTTL: time.Hour, Capacity: 1 << 30, ErrorRate: 1e-9, Generations: 64}), nil},
		{"add past", second(s.AddUntil("x", items("a", 1), now.Add(-time.Millisecond))), ErrExpiryPast},
		{"add beyond TTL", second(s.AddUntil("x", items("a", 1), now.Add(time.Hour+time.Millisecond))), ErrExpiryBeyondTTL},
		{"add to missing key", second(s.AddUntil("nokey", items("a", 1), now.Add(time.Minute))), ErrNotFound},
		{"add to bloom key", second(s.AddUntil("bf", items("a", 1), now.Add(time.Minute))), ErrWrongType},
		{"exists on bloom key", second(expiringHeld(s.MayContain("bf", items("a", 1)))), ErrWrongType},
		{"info on bloom key", second(s.expiringInfo("bf")), ErrWrongType},
		{"info on missing key", second(s.expiringInfo("nokey")), ErrNotFound},
		{"BF.ADD on expiring key", third(s.Add("x", items("a", 1), AddOptions{})), ErrWrongType},
		{"CF.ADD on expiring key", third(s.Insert("x", items("a", 1), InsertOptions{})), ErrWrongType},
		{"BF.INFO on expiring key", second(s.bloomInfo("x")), ErrWrongType},
		{"CF.INFO on expiring key", second(s.cuckooInfo("x")), ErrWrongType},
		{"CF.DEL on expiring key", second(s.Remove("x", []byte("a"))), ErrWrongType},
	} {
		switch {
		case tt.want == nil && !IsArgError(tt.err):
			t.Errorf("%s: %v, want a bad-argument error", tt.name, tt.err)
		case tt.want != nil && !errors.Is(tt.err, tt.want):
			t.Errorf("%s: %v, want %v", tt.name, tt.err, tt.want)
		}
	}
	if s.Type("y") != KindNone {
		t.Error("a refused XReserve created its key")
	}
	if got, err := expiringHeld(s.MayContain("nokey", items("a", 2))); err != nil || got[0] || got[1] {
		t.Errorf("XExists on a missing key = %v, %v", got, err)
	}
	if s.Type("x") != KindExpiring || s.Type("x").String() != "expiring" {
		t.Errorf("Type = %v / %q", s.Type("x"), s.Type("x").String())
	}
}

func second[T any](_ T, err error) error        { return err }
func third[T, U any](_ T, _ U, err error) error { return err }

// TestExpiringCrossTypeReads: the Bloom and cuckoo lookups answer for an
// expiring key as BG.XEXISTS does, so a client that uses the wrong command
// never sees a revoked item reported absent.
func TestExpiringCrossTypeReads(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Config{Now: clock.Now})
	if err := s.Reserve("x", xparams(time.Hour, 1000)); err != nil {
		t.Fatal(err)
	}
	mustXAdd(t, s, "x", clock.Now().Add(time.Minute), []byte("tok"))
	if got, kind := s.MayContain("x", [][]byte{[]byte("tok")}); !got[0] || kind != KindExpiring || s.Count("x", []byte("tok")) != 1 {
		t.Errorf("MayContain (%v, %v) or Count on an expiring key reports a live item absent", got, kind)
	}
}

// TestExpiringNoFalseNegatives adds items with spread expiries while the
// clock advances, sweeping generations as the server does, and checks at
// every step that every item whose expiry has not passed is present, and
// that items whose window ended are absent (up to the false-positive rate).
func TestExpiringNoFalseNegatives(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	cfg := Config{Now: clock.Now, DataDir: dir, Fsync: FsyncNo}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { s.Close() }() // the store open last; the others crash
	const maxTTL = time.Hour
	n := 20000
	if testing.Short() {
		n = 4000
	}
	if err := s.Reserve("revoked", xparams(maxTTL, uint64(2*n))); err != nil {
		t.Fatal(err)
	}
	window := maxTTL / 7
	type entry struct {
		id  []byte
		exp time.Time
	}
	var all []entry
	rng := rand.New(rand.NewPCG(1, 2))
	id := 0
	addBatch := func(k int) {
		for range k {
			e := entry{fmt.Appendf(nil, "jti-%d", id), clock.Now().Add(time.Second + time.Duration(rng.Int64N(int64(maxTTL-time.Second))))}
			id++
			mustXAdd(t, s, "revoked", e.exp, e.id)
			all = append(all, e)
		}
	}
	addBatch(n)
	step := 37 * time.Second
	restarts := 0
	for elapsed := time.Duration(0); elapsed < 2*maxTTL+window; elapsed += step {
		clock.Advance(step)
		if elapsed < maxTTL {
			addBatch(n / 100) // keeps arriving for one max TTL
		}
		s.expireAll()
		if elapsed/(20*time.Minute) != (elapsed+step)/(20*time.Minute) {
			// A crash (no snapshot) every 20 minutes of clock: the log
			// replays under the advanced clock.
			crash(s)
			if s, err = Open(cfg); err != nil {
				t.Fatal(err)
			}
			restarts++
		}
		if restarts == 2 {
			if err := s.Snapshot(); err != nil {
				t.Fatal(err)
			}
			restarts++
		}
		now := clock.Now()
		keys := make([][]byte, len(all))
		for i, e := range all {
			keys[i] = e.id
		}
		got, err := expiringHeld(s.MayContain("revoked", keys))
		if err != nil {
			t.Fatal(err)
		}
		fn, stale, staleFP := 0, 0, 0
		for i, e := range all {
			switch {
			case !e.exp.Before(now):
				if !got[i] {
					fn++
					if fn < 5 {
						t.Errorf("at +%v: %s (expires %v) reported absent", elapsed+step, e.id, e.exp.Sub(now))
					}
				}
			case now.Sub(e.exp) > window:
				stale++
				if got[i] {
					staleFP++
				}
			}
		}
		if fn > 0 {
			t.Fatalf("at +%v: %d false negatives", elapsed+step, fn)
		}
		if stale >= 1000 && float64(staleFP) > 0.01*float64(stale) {
			t.Fatalf("at +%v: %d of %d items a window past their expiry still present: expired items came back", elapsed+step, staleFP, stale)
		}
	}
	if restarts < 3 {
		t.Fatalf("only %d restarts", restarts)
	}
	info, err := s.expiringInfo("revoked")
	if err != nil {
		t.Fatal(err)
	}
	if info.Generations != 0 || info.Size != 0 || s.UsedMemory() != 0 {
		t.Errorf("after every item expired: %+v, used memory %d; want nothing held", info, s.UsedMemory())
	}
}

// TestExpiringMemoryFlat: under a steady arrival of items with the max TTL,
// the memory held after a second full max TTL of churn is within 1.2 × the
// first's, and generations are dropped by the sweep with no add.
func TestExpiringMemoryFlat(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Config{Now: clock.Now})
	const maxTTL = 10 * time.Minute
	const perStep = 500
	if err := s.Reserve("r", xparams(maxTTL, 60*perStep)); err != nil {
		t.Fatal(err)
	}
	id := 0
	run := func() int64 {
		for range 60 { // one max TTL in steps of 10 s
			its := make([][]byte, perStep)
			for i := range its {
				its[i] = fmt.Appendf(nil, "t%d", id)
				id++
			}
			mustXAdd(t, s, "r", clock.Now().Add(maxTTL), its...)
			clock.Advance(10 * time.Second)
			s.expireAll()
		}
		return s.UsedMemory()
	}
	first := run()
	second := run()
	third := run()
	info, _ := s.expiringInfo("r")
	t.Logf("used memory after 1, 2, 3 max TTLs: %d, %d, %d bytes; %+v", first, second, third, info)
	if float64(second) > 1.2*float64(first) || float64(third) > 1.2*float64(first) {
		t.Errorf("memory grew with churn: %d, then %d and %d", first, second, third)
	}
	if max := int64(info.MaxSize); third > max {
		t.Errorf("used %d > the key's bound %d", third, max)
	}
	clock.Advance(maxTTL + maxTTL/7 + time.Second)
	if n := s.expireAll(); n == 0 || s.UsedMemory() != 0 {
		t.Errorf("sweep with no adds dropped %d generations, %d bytes left", n, s.UsedMemory())
	}
}

func TestExpiringMaxMemory(t *testing.T) {
	clock := newFakeClock()
	p := xparams(time.Hour, 70000)
	gen, _ := p.withDefaults().generationBytes()
	s := openStore(t, Config{Now: clock.Now, MaxMemory: 2*gen + gen/2})
	if err := s.Reserve("x", p); err != nil {
		t.Fatal(err)
	}
	now := clock.Now()
	for i := range 3 { // three windows: three generations
		mustXAdd(t, s, "x", now.Add(time.Duration(i+1)*(time.Hour/7)-time.Second), []byte{byte(i)})
	}
	if s.UsedMemory() != 3*gen {
		t.Fatalf("used %d, want 3 generations of %d", s.UsedMemory(), gen)
	}
	if _, err := s.AddUntil("x", items("a", 1), now.Add(time.Minute)); !errors.Is(err, ErrOOM) {
		t.Errorf("add over maxmemory: %v, want ErrOOM", err)
	}
	if got, _ := expiringHeld(s.MayContain("x", [][]byte{{0}, {1}, {2}})); !got[0] || !got[1] || !got[2] {
		t.Errorf("reads over maxmemory: %v", got)
	}
	if n, err := s.Delete([]string{"x"}); n != 1 || err != nil || s.UsedMemory() != 0 {
		t.Errorf("Del = %d, %v; used %d", n, err, s.UsedMemory())
	}
}

// TestExpiringReplayNotResurrected: an item acknowledged before a crash whose
// expiry passes while the server is down is absent after the restart, from
// the log alone (no snapshot) and from a snapshot; a live one is present.
func TestExpiringReplayNotResurrected(t *testing.T) {
	for _, snap := range []bool{false, true} {
		t.Run(fmt.Sprintf("snapshot=%v", snap), func(t *testing.T) {
			clock := newFakeClock()
			cfg := Config{Now: clock.Now, DataDir: t.TempDir(), Fsync: FsyncAlways}
			s, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			const maxTTL = 70 * time.Minute // windows of 10 minutes
			if err := s.Reserve("r", xparams(maxTTL, 10000)); err != nil {
				t.Fatal(err)
			}
			now := clock.Now()
			short, long := items("short", 2000), items("long", 2000)
			mustXAdd(t, s, "r", now.Add(5*time.Minute), short...)
			mustXAdd(t, s, "r", now.Add(maxTTL), long...)
			if snap {
				if err := s.Snapshot(); err != nil {
					t.Fatal(err)
				}
			}
			crash(s)
			clock.Advance(25 * time.Minute) // down past the short ones' window
			r := openStore(t, cfg)
			present := 0
			got, _ := expiringHeld(r.MayContain("r", short))
			for _, ok := range got {
				if ok {
					present++
				}
			}
			if present > 20 {
				t.Errorf("%d of %d expired items present after the restart", present, len(short))
			}
			got, _ = expiringHeld(r.MayContain("r", long))
			for i, ok := range got {
				if !ok {
					t.Fatalf("live item %s lost", long[i])
				}
			}
			info, _ := r.expiringInfo("r")
			if info.Items != uint64(len(long)) {
				t.Errorf("items after the restart = %d, want %d", info.Items, len(long))
			}
		})
	}
}

// TestExpiringReplayClockBack: the clock stepped back across a restart so
// far that the filter cannot hold a logged item; the key then answers
// present to every lookup until the item's expiry, also after a snapshot
// and another restart, rather than lose it.
func TestExpiringReplayClockBack(t *testing.T) {
	clock := newFakeClock()
	var logBuf bytes.Buffer
	cfg := Config{Now: clock.Now, DataDir: t.TempDir(), Fsync: FsyncAlways}
	s, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	const maxTTL = 3 * time.Hour // G = 4: windows of one hour
	if err := s.Reserve("r", ExpiringParams{MaxTTL: maxTTL, Capacity: 100, Generations: 4}); err != nil {
		t.Fatal(err)
	}
	// From 00:30, fill the four windows ending 01:00 to 04:00; then, at
	// 03:30, add one expiring at 06:30 (window ending 07:00).
	clock.Advance(30 * time.Minute)
	for i, d := range []time.Duration{10 * time.Minute, 70 * time.Minute, 130 * time.Minute, maxTTL} {
		mustXAdd(t, s, "r", clock.Now().Add(d), fmt.Appendf(nil, "w%d", i))
	}
	if o, _ := s.lookup("r"); o.key.subFilters() != 4 {
		t.Fatalf("%d generations, want 4", o.key.subFilters())
	}
	clock.Advance(3 * time.Hour)
	mustXAdd(t, s, "r", clock.Now().Add(maxTTL), []byte("late"))
	lateExp := clock.Now().Add(maxTTL)
	crash(s)
	clock.Advance(-3 * time.Hour) // back to 00:30: the four early windows are live again
	cfg.Logger = slog.New(slog.NewTextHandler(&logBuf, nil))
	r, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(logBuf.String(), "answers present") {
		t.Fatalf("no fail-open warning; log:\n%s", logBuf.String())
	}
	if got, _ := expiringHeld(r.MayContain("r", [][]byte{[]byte("late"), []byte("never-added")})); !got[0] || !got[1] {
		t.Fatalf("after a replay that could not hold an item: %v, want every lookup present", got)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	r2 := openStore(t, Config{Now: clock.Now, DataDir: cfg.DataDir})
	if got, _ := expiringHeld(r2.MayContain("r", [][]byte{[]byte("late")})); !got[0] {
		t.Fatal("the fail-open state did not survive a snapshot")
	}
	clock.Ns(lateExp.Add(time.Second))
	if got, _ := expiringHeld(r2.MayContain("r", [][]byte{[]byte("never-added")})); got[0] {
		t.Error("still failing open after the item's expiry")
	}
}

func (c *fakeClock) Ns(t time.Time) { c.ns.Store(t.UnixNano()) }

// TestExpiringGolden pins the encoding of an expiring key's records: its
// create, an add, and its snapshot entry.
func TestExpiringGolden(t *testing.T) {
	clock := newFakeClock()
	dir := t.TempDir()
	s := openStore(t, Config{Now: clock.Now, DataDir: dir})
	if err := s.Reserve("revoked", ExpiringParams{MaxTTL: 7 * time.Minute, Capacity: 70, ErrorRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	mustXAdd(t, s, "revoked", clock.Now().Add(90*time.Second), []byte("jti-1"), []byte("jti-2"))
	mustXAdd(t, s, "revoked", clock.Now().Add(6*time.Minute), []byte("jti-3"))
	logData, err := os.ReadFile(lastSegment(t, dir))
	if err != nil {
		t.Fatal(err)
	}
	o, _ := s.lookup("revoked")
	o.mu.Lock()
	put, err := o.putRecord()
	o.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	var golden bytes.Buffer
	golden.Write(logData)
	golden.Write(put.appendPayload(nil))
	path := filepath.Join("testdata", "expiring.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, golden.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(golden.Bytes(), want) {
		t.Fatalf("expiring key encoding changed (%d bytes, golden %d); if intended, run with -update", golden.Len(), len(want))
	}
	// The golden bytes decode to the same filter under the same clock.
	var recs []*record
	err = durable.ReadSegment(bytes.NewReader(logData), int64(len(logData)), 1<<20, func(lsn uint64, body []byte) error {
		r, err := decodeBody(lsn, body)
		recs = append(recs, r)
		return err
	})
	if err != nil || len(recs) != 3 || recs[1].op != opXAdd || len(recs[1].hashes) != 2 {
		t.Fatalf("golden log: %d records, %v", len(recs), err)
	}
	r, err := decodePayload(want[len(logData):])
	if err != nil {
		t.Fatal(err)
	}
	o2, err := objectFromPut(r, 1<<20, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"jti-1", "jti-2", "jti-3"} {
		if !o2.key.(*expiringKey).wf.MayContain([]byte(k)) {
			t.Errorf("golden snapshot entry lost %s", k)
		}
	}
}

// FuzzDecodeExpiring feeds arbitrary record payloads, seeded with an
// expiring key's, to the decoder and the replay.
func FuzzDecodeExpiring(f *testing.F) {
	clock := newFakeClock()
	p := ExpiringParams{MaxTTL: 7 * time.Minute, Capacity: 70, ErrorRate: 0.01, Generations: 8}
	f.Add((&record{op: opCreate, name: "k", spec: p}).appendPayload(nil))
	f.Add((&record{op: opXAdd, name: "k", hashes: []uint64{1, 2}, expiry: clock.Now().Add(time.Minute).UnixNano()}).appendPayload(nil))
	s := &Store{keys: map[string]*object{}, cfg: Config{Now: clock.Now}}
	fillDefaults(&s.cfg)
	s.log = s.cfg.Logger
	o, err := newObject("k", p, clock.Now)
	if err != nil {
		f.Fatal(err)
	}
	o.key.(*expiringKey).wf.AddString("x", clock.Now().Add(time.Minute))
	put, _ := o.putRecord()
	f.Add(put.appendPayload(nil))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, err := decodePayload(data)
		if err != nil {
			return
		}
		if r.op == opPut {
			if o, err := objectFromPut(r, 1<<20, clock.Now); err == nil {
				o.key.mayContain(clock.Now, [][]byte{[]byte("x")}, make([]bool, 1))
			}
			return
		}
		st := &Store{keys: map[string]*object{}, cfg: s.cfg, log: s.log}
		if r.op == opXAdd {
			st.apply(&record{lsn: 0, op: opCreate, name: r.name, spec: p})
		}
		r.lsn++
		st.apply(r)
	})
}

// TestExpiringSweepOnItsOwn: with no client action at all, the Store's own
// sweep drops a generation once the clock passes its end and releases its
// memory.
func TestExpiringSweepOnItsOwn(t *testing.T) {
	clock := newFakeClock()
	s := openStore(t, Config{Now: clock.Now})
	if err := s.Reserve("r", xparams(time.Hour, 1000)); err != nil {
		t.Fatal(err)
	}
	mustXAdd(t, s, "r", clock.Now().Add(time.Minute), []byte("a"))
	if s.UsedMemory() == 0 {
		t.Fatal("no memory held after an add")
	}
	clock.Advance(time.Hour / 7 * 2)
	testsvc.Eventually(t, 10*expireSweepInterval, func() bool { return s.UsedMemory() == 0 },
		"the sweep to release the expired generation (used %d)", s.UsedMemory())
}
