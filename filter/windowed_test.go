package filter_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/filter"
	"github.com/bloomgate/bloomgate/internal/filtertest"
)

// fakeClock is a clock tests move by hand; safe for concurrent use.
type fakeClock struct{ ns atomic.Int64 }

func newFakeClock(t time.Time) *fakeClock {
	c := &fakeClock{}
	c.Set(t)
	return c
}

func (c *fakeClock) Now() time.Time          { return time.Unix(0, c.ns.Load()).UTC() }
func (c *fakeClock) Set(t time.Time)         { c.ns.Store(t.UnixNano()) }
func (c *fakeClock) Advance(d time.Duration) { c.ns.Add(int64(d)) }

var clockStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func newWindowed(t testing.TB, cfg filter.WindowedConfig) *filter.Windowed {
	t.Helper()
	w, err := filter.NewWindowed(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func TestWindowedConformance(t *testing.T) {
	clock := newFakeClock(clockStart) // never moves: every key stays
	exp := clockStart.Add(time.Hour)
	filtertest.Run(t, filtertest.Factory{
		New: func(n uint64, p float64) (filter.Filter, error) {
			return filter.NewWindowed(filter.WindowedConfig{MaxTTL: time.Hour, Capacity: n, FPRate: p, Seed: 42, Now: clock.Now})
		},
		Decode: func(r io.Reader) (filter.Filter, error) {
			return filter.DecodeWindowed(r, filter.DecodeConfig{}, clock.Now)
		},
		Add:       func(f filter.Filter, key []byte) error { return f.(*filter.Windowed).Add(key, exp) },
		AddString: func(f filter.Filter, key string) error { return f.(*filter.Windowed).AddString(key, exp) },
		AddHash:   func(f filter.Filter, h uint64) error { return f.(*filter.Windowed).AddHash(h, exp) },
		Large:     !raceEnabled,
	})
}

// TestWindowedIsNotAForeverFilter pins that a Windowed cannot be used where
// code expects keys to stay for the filter's whole life: it has no method
// AddHash(uint64) error (nor Add([]byte) error), so no interface a consumer
// defines with those methods accepts it, while the other families satisfy
// them.
func TestWindowedIsNotAForeverFilter(t *testing.T) {
	type foreverByHash interface{ AddHash(h uint64) error }
	type forever interface{ Add(key []byte) error }
	var w any = (*filter.Windowed)(nil)
	if _, ok := w.(foreverByHash); ok {
		t.Error("*Windowed implements AddHash(uint64) error")
	}
	if _, ok := w.(forever); ok {
		t.Error("*Windowed implements Add([]byte) error")
	}
	if _, ok := w.(filter.Filter); !ok {
		t.Error("*Windowed does not implement filter.Filter")
	}
	for _, f := range []any{(*filter.Bloom)(nil), (*filter.Scalable)(nil), (*filter.Counting)(nil), (*filter.Cuckoo)(nil)} {
		_, byHash := f.(foreverByHash)
		_, byKey := f.(forever)
		if !byHash || !byKey {
			t.Errorf("%T: AddHash(uint64) error %v, Add([]byte) error %v; want both", f, byHash, byKey)
		}
	}
}

func TestNewWindowedInvalid(t *testing.T) {
	ok := filter.WindowedConfig{MaxTTL: time.Hour, Capacity: 100}
	for _, tc := range []struct {
		name string
		edit func(*filter.WindowedConfig)
		want error
	}{
		{"zero MaxTTL", func(c *filter.WindowedConfig) { c.MaxTTL = 0 }, filter.ErrInvalidParams},
		{"negative MaxTTL", func(c *filter.WindowedConfig) { c.MaxTTL = -time.Second }, filter.ErrInvalidParams},
		{"MaxTTL of a century", func(c *filter.WindowedConfig) { c.MaxTTL = 100 * 365 * 24 * time.Hour }, filter.ErrInvalidParams},
		{"one generation", func(c *filter.WindowedConfig) { c.Generations = 1 }, filter.ErrInvalidParams},
		{"negative generations", func(c *filter.WindowedConfig) { c.Generations = -3 }, filter.ErrInvalidParams},
		{"too many generations", func(c *filter.WindowedConfig) { c.Generations = 257 }, filter.ErrInvalidParams},
		{"zero capacity", func(c *filter.WindowedConfig) { c.Capacity = 0 }, filter.ErrInvalidParams},
		{"rate one", func(c *filter.WindowedConfig) { c.FPRate = 1 }, filter.ErrInvalidParams},
		{"NaN rate", func(c *filter.WindowedConfig) { c.FPRate = math.NaN() }, filter.ErrInvalidParams},
		{"too large", func(c *filter.WindowedConfig) { c.Capacity = 1 << 50 }, filter.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ok
			tc.edit(&cfg)
			if _, err := filter.NewWindowed(cfg); !errors.Is(err, tc.want) {
				t.Fatalf("NewWindowed(%+v) = %v, want %v", cfg, err, tc.want)
			}
		})
	}
	w := newWindowed(t, ok)
	if w.Window() != time.Hour/7+1 || w.MaxTTL() != time.Hour {
		t.Errorf("defaults: window %v, MaxTTL %v", w.Window(), w.MaxTTL())
	}
	// Eight generations at DefaultFPRate (0.1 %) compound: each at
	// 1 − 0.999^(1/8).
	if got, want := w.GenerationSizing().FPRate, 1-math.Pow(1-filter.DefaultFPRate, 1.0/8); math.Abs(got-want) > 1e-15 {
		t.Errorf("generation rate %g, want %g", got, want)
	}
}

// TestWindowedExpiry checks every key just before and exactly at its expiry,
// with expired generations dropped as the clock moves.
func TestWindowedExpiry(t *testing.T) {
	t.Parallel()
	start := clockStart.Add(123 * time.Millisecond) // not on a window boundary
	clock := newFakeClock(start)
	const maxTTL = time.Hour
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: maxTTL, Capacity: 1000, FPRate: 0.001, Now: clock.Now})
	type entry struct {
		key []byte
		exp time.Time
	}
	r := rand.New(rand.NewPCG(1, 2))
	keys := filtertest.Emails(3000, 100)
	entries := make([]entry, len(keys))
	for i, k := range keys {
		ttl := time.Duration(r.Int64N(int64(maxTTL) + 1))
		switch i {
		case 0:
			ttl = 0 // expires now
		case 1:
			ttl = maxTTL // the longest allowed
		}
		entries[i] = entry{k, start.Add(ttl)}
		if err := w.Add(k, entries[i].exp); err != nil {
			t.Fatalf("Add(+%v): %v", ttl, err)
		}
	}
	if err := w.AddString("too-late", start.Add(maxTTL+1)); !errors.Is(err, filter.ErrInvalidParams) {
		t.Errorf("expiry past MaxTTL: %v, want ErrInvalidParams", err)
	}
	items := w.Stats().Items
	if err := w.AddString("already-expired", start.Add(-1)); err != nil {
		t.Errorf("expiry in the past: %v", err)
	}
	if got := w.Stats().Items; got != items {
		t.Errorf("an already expired key was added")
	}
	if n := w.Live(); n != 8 {
		t.Errorf("%d generations live, want 8", n)
	}
	slices.SortFunc(entries, func(a, b entry) int { return a.exp.Compare(b.exp) })
	maxLive := 0
	for _, e := range entries {
		for _, at := range []time.Time{e.exp.Add(-1), e.exp} {
			if at.After(clock.Now()) {
				clock.Set(at)
			}
			if _, err := w.Expire(); err != nil {
				t.Fatal(err)
			}
			if !w.MayContain(e.key) {
				t.Fatalf("key expiring at +%v missing at +%v", e.exp.Sub(start), at.Sub(start))
			}
			maxLive = max(maxLive, w.Live())
		}
	}
	if maxLive > 8 {
		t.Errorf("%d generations live at once", maxLive)
	}
	// A window after the last expiry, everything is gone.
	clock.Set(entries[len(entries)-1].exp.Add(w.Window()))
	if n, _ := w.Expire(); n == 0 || w.Live() != 0 {
		t.Fatalf("dropped %d, %d still live", n, w.Live())
	}
	if s := w.Stats(); s.Bytes != 0 || s.Items != 0 || s.EstimatedFPRate != 0 || s.FillRatio != 0 {
		t.Errorf("stats with nothing live: %+v", s)
	}
	for _, e := range entries {
		if w.MayContain(e.key) {
			t.Fatalf("expired key still present")
		}
	}
}

// TestWindowedBoundedMemory runs the clock through 100 windows, adding keys
// with random TTLs all along: memory stays at G generations, and every key is
// present until it expires.
func TestWindowedBoundedMemory(t *testing.T) {
	t.Parallel()
	clock := newFakeClock(clockStart)
	const maxTTL, capacity, steps = 7 * time.Hour, 400, 4
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: maxTTL, Capacity: capacity, Now: clock.Now})
	genBytes := w.GenerationSizing().Bytes()
	r := rand.New(rand.NewPCG(3, 4))
	type entry struct {
		key []byte
		exp time.Time
	}
	var live []entry
	windows := 100
	if raceEnabled {
		windows = 20
	}
	maxBytes := uint64(0)
	for step := range windows * steps {
		keys := filtertest.Emails(capacity/steps, 200+uint64(step))
		for _, k := range keys {
			exp := clock.Now().Add(time.Duration(r.Int64N(int64(maxTTL))))
			if err := w.Add(k, exp); err != nil {
				t.Fatal(err)
			}
			live = append(live, entry{k, exp})
		}
		s := w.Stats()
		maxBytes = max(maxBytes, s.Bytes)
		if s.Bytes > 8*genBytes || w.Live() > 8 {
			t.Fatalf("step %d: %d bytes in %d generations, limit 8 × %d", step, s.Bytes, w.Live(), genBytes)
		}
		// Check the keys not yet expired, and forget the rest.
		now := clock.Now()
		live = slices.DeleteFunc(live, func(e entry) bool { return e.exp.Before(now) })
		for _, e := range live {
			if !w.MayContain(e.key) {
				t.Fatalf("step %d: key expiring in %v missing", step, e.exp.Sub(now))
			}
		}
		clock.Advance(w.Window() / steps)
	}
	s := w.Stats()
	t.Logf("after %d windows: %d generations, %d bytes (max %d, one generation %d), %d items held for %d live keys",
		windows, w.Live(), s.Bytes, maxBytes, genBytes, s.Items, len(live))
}

// TestWindowedFPRate fills every generation to capacity and checks the
// compound rate against the target.
func TestWindowedFPRate(t *testing.T) {
	t.Parallel()
	// W = 7h/7 = 1h; starting at 00:30 the live windows end at 01:00 …
	// 08:00, eight of them.
	start := clockStart.Add(30 * time.Minute)
	clock := newFakeClock(start)
	const p = 0.01
	capacity, q := 10_000, 400_000
	if raceEnabled {
		capacity, q = 2000, 50_000
	}
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: 7 * time.Hour, Capacity: uint64(capacity), FPRate: p, Now: clock.Now})
	var all [][]byte
	for k := range 8 {
		end := clockStart.Add(time.Duration(k+1) * time.Hour)
		exp := end.Add(-15 * time.Minute)
		if last := start.Add(7 * time.Hour); exp.After(last) {
			exp = last
		}
		keys := filtertest.Emails(capacity, 300+uint64(k))
		for _, key := range keys {
			if err := w.Add(key, exp); err != nil {
				t.Fatal(err)
			}
		}
		all = append(all, keys...)
	}
	if w.Live() != 8 {
		t.Fatalf("%d generations, want 8", w.Live())
	}
	filtertest.CheckPresent(t, w, all)
	fp := filtertest.MeasureFP(w, filtertest.Emails(q, 399))
	s := w.Stats()
	if limit := filtertest.FPBound(q, p); fp > limit {
		t.Errorf("measured FP %d/%d exceeds the bound %d for %g", fp, q, limit, p)
	}
	if s.EstimatedFPRate > 1.1*p { // an estimate from the bits: near p at capacity
		t.Errorf("estimated compound FP %.5f well above the target %g", s.EstimatedFPRate, p)
	}
	if s.Capacity != 8*uint64(capacity) || s.Items != 8*uint64(capacity) || s.Bytes != 8*w.GenerationSizing().Bytes() {
		t.Errorf("stats: %+v", s)
	}
	t.Logf("8 generations × %d keys: FP %.5f (target %g, estimated %.5f), %.2f bits/key",
		capacity, float64(fp)/float64(q), p, s.EstimatedFPRate, float64(s.Bits)/float64(s.Items))
}

// TestWindowedClockBack steps the clock back: generations created at the
// later time stay, and the count never exceeds G.
func TestWindowedClockBack(t *testing.T) {
	clock := newFakeClock(clockStart)
	const maxTTL = 8 * time.Hour
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: maxTTL, Generations: 4, Capacity: 1000, Now: clock.Now})
	type entry struct {
		key []byte
		exp time.Time
	}
	var entries []entry
	keys := filtertest.Emails(400, 500)
	for i, k := range keys {
		if i == 200 {
			clock.Advance(-3 * w.Window())
		}
		exp := clock.Now().Add(time.Duration(i%8) * maxTTL / 7)
		if err := w.Add(k, exp); err != nil {
			t.Fatal(err)
		}
		entries = append(entries, entry{k, exp})
		if w.Live() > 4 {
			t.Fatalf("%d generations live, limit 4", w.Live())
		}
	}
	for _, e := range entries {
		clock.Set(e.exp)
		if !w.MayContain(e.key) {
			t.Fatalf("key missing at its expiry")
		}
	}
	clock.Set(clockStart.Add(-time.Hour))
	for _, e := range entries {
		if !w.MayContain(e.key) {
			t.Fatalf("key missing before its expiry")
		}
	}
}

// TestWindowedConcurrent runs adders, readers, an expirer and a clock that
// keeps moving: no key may be missing while its expiry is ahead.
func TestWindowedConcurrent(t *testing.T) {
	t.Parallel()
	clock := newFakeClock(clockStart)
	const maxTTL, writers, perWriter = time.Hour, 2, 4000
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: maxTTL, Generations: 6, Capacity: 2000, Now: clock.Now})
	keys := make([][][]byte, writers)
	exps := make([][]int64, writers) // Unix ns, written before acked is raised
	acked := make([]atomic.Int64, writers)
	for i := range writers {
		keys[i] = filtertest.Emails(perWriter, 600+uint64(i))
		exps[i] = make([]int64, perWriter)
	}
	var misses atomic.Int64
	done := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() { // the clock: a window every 200 adds or so
		for {
			select {
			case <-done:
				return
			default:
			}
			clock.Advance(w.Window() / 100)
			for range 50 {
				select {
				case <-done:
					return
				default:
				}
				if _, err := w.Expire(); err != nil {
					t.Error(err)
					return
				}
			}
		}
	})
	for r := range 2 {
		bg.Go(func() {
			for pass := 0; ; pass++ {
				select {
				case <-done:
					return
				default:
				}
				i := (r + pass) % writers
				n := acked[i].Load()
				for j, k := range keys[i][:n] {
					if !w.MayContain(k) && exps[i][j] >= clock.Now().UnixNano() {
						misses.Add(1)
					}
				}
			}
		})
	}
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(i), 7))
			for j, k := range keys[i] {
				exp := clock.Now().Add(time.Duration(r.Int64N(int64(maxTTL / 2))))
				exps[i][j] = exp.UnixNano()
				if err := w.Add(k, exp); err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				acked[i].Store(int64(j + 1))
			}
		})
	}
	wg.Wait()
	close(done)
	bg.Wait()
	if m := misses.Load(); m > 0 {
		t.Fatalf("%d false negatives for unexpired keys", m)
	}
	if w.Live() > 6 {
		t.Errorf("%d generations live", w.Live())
	}
}

func TestWindowedAllocs(t *testing.T) {
	clock := newFakeClock(clockStart)
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: time.Hour, Capacity: 1000, Now: clock.Now})
	key := []byte("jti-0001")
	exp := clockStart.Add(10 * time.Minute)
	w.Add(key, time.Time{}) // create the generations used below
	w.Add(key, exp)
	for name, fn := range map[string]func(){
		"Add MaxTTL":       func() { w.Add(key, time.Time{}) },
		"Add":              func() { w.Add(key, exp) },
		"AddString":        func() { w.AddString("jti-0002", exp) },
		"AddHash":          func() { w.AddHash(0x1234, exp) },
		"MayContainHash":   func() { w.MayContainHash(0x1234) },
		"Items+Bytes":      func() { _ = w.Items() + w.Bytes() },
		"MayContain":       func() { w.MayContain(key) },
		"MayContainString": func() { w.MayContainString("jti-0003") },
	} {
		if n := testing.AllocsPerRun(1000, fn); n != 0 {
			t.Errorf("%s allocates %.1f times per call", name, n)
		}
	}
}

// goldenWindowed has three generations (W = 20 min); its encoding is pinned in
// testdata/windowed.golden.
func goldenWindowed(t testing.TB) (*filter.Windowed, *fakeClock) {
	clock := newFakeClock(clockStart)
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: time.Hour, Generations: 4, Capacity: 20, FPRate: 0.01, Seed: 0x0123456789abcdef, Now: clock.Now})
	for i, k := range []string{"alice@example.com", "bob@example.com", "carol@example.com"} {
		if err := w.AddString(k, clockStart.Add(time.Duration(i+1)*20*time.Minute)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Live() != 3 {
		t.Fatalf("golden filter has %d generations, want 3", w.Live())
	}
	return w, clock
}

func TestWindowedGolden(t *testing.T) {
	w, clock := goldenWindowed(t)
	want := checkGolden(t, "windowed.golden", encode(t, w))
	keys := []string{"alice@example.com", "bob@example.com", "carol@example.com"}
	f, err := filter.DecodeWindowed(bytes.NewReader(want), filter.DecodeConfig{}, clock.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if !f.MayContainString(k) {
			t.Fatalf("golden filter lost %q", k)
		}
	}
	// The generic Decode runs the filter on time.Now, when these keys may
	// have expired: it must read the same filter.
	g, err := filter.Decode(bytes.NewReader(want), filter.DecodeConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []filter.Filter{f, g} {
		if d.Stats() != w.Stats() || filter.KindWindowed.String() != "windowed" {
			t.Fatalf("stats %+v, want %+v", d.Stats(), w.Stats())
		}
		if !bytes.Equal(encode(t, d), want) {
			t.Fatal("re-encoding the golden filter changed its bytes")
		}
	}
	// The decoded filter keeps expiring on its clock.
	d, _ := filter.DecodeWindowed(bytes.NewReader(want), filter.DecodeConfig{}, clock.Now)
	clock.Advance(20*time.Minute + 1)
	if n, _ := d.Expire(); n != 1 || d.Live() != 2 {
		t.Fatalf("expired %d, %d live", n, d.Live())
	}
}

func TestDecodeWindowedErrors(t *testing.T) {
	w, _ := goldenWindowed(t)
	enc := encode(t, w)
	// Offsets: parameters at 20, generation ends at 68, 76, 84, payload
	// length at 92, the generations' Bloom frames from 100.
	const p, ends, pl, frames = 20, 68, 92, 100
	frameLen := int(binary.LittleEndian.Uint64(enc[pl:])) / 3
	patch := func(off int, b ...byte) []byte {
		c := bytes.Clone(enc)
		copy(c[off:], b)
		return resealTail(c)
	}
	// patchInner patches the first generation's frame and reseals it too.
	patchInner := func(off int, b ...byte) []byte {
		c := bytes.Clone(enc)
		copy(c[frames+off:], b)
		resealTail(c[frames : frames+frameLen])
		return resealTail(c)
	}
	u64 := func(v uint64) []byte { return binary.LittleEndian.AppendUint64(nil, v) }
	u32 := func(v uint32) []byte { return binary.LittleEndian.AppendUint32(nil, v) }
	end0 := binary.LittleEndian.Uint64(enc[ends:])
	end1 := binary.LittleEndian.Uint64(enc[ends+8:])
	for _, tc := range []struct {
		name string
		in   []byte
		cfg  filter.DecodeConfig
		want error
	}{
		{"empty", nil, filter.DecodeConfig{}, filter.ErrCorrupt},
		{"checksum", func() []byte { c := bytes.Clone(enc); c[len(c)-1] ^= 1; return c }(), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"bloom kind", patch(6, byte(filter.KindBloom)), filter.DecodeConfig{}, filter.ErrKindMismatch},
		{"params length", patch(16, 47), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero MaxTTL", patch(p, u64(0)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"negative MaxTTL", patch(p, u64(math.MaxUint64)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"window", patch(p+8, u64(uint64(time.Minute))...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero generations", patch(p+16, u32(0)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"one generation", patch(p+16, u32(1)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"2^31 generations", patch(p+16, u32(1<<31)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"reserved", patch(p+20, 1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero capacity", patch(p+24, u64(0)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"other capacity", patch(p+24, u64(21)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"zero rate", patch(p+32, u64(0)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"NaN rate", patch(p+32, u64(math.Float64bits(math.NaN()))...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"generation count", patch(p+40, u32(2)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"reserved 2", patch(p+44, 1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"ends out of order", patch(ends, append(u64(end1), u64(end0)...)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"duplicate end", patch(ends, u64(end1)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"end off the window grid", patch(ends, u64(end0+1)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"payload length", patch(pl, u64(8)...), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"generation kind", patchInner(6, byte(filter.KindCuckoo)), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"generation seed", patchInner(8, 1), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"generation capacity", patchInner(20, 21), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"generation checksum", func() []byte {
			c := bytes.Clone(enc)
			c[frames+frameLen-1] ^= 1
			return resealTail(c)
		}(), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"truncated generation", func() []byte {
			c := bytes.Clone(enc[:frames+frameLen/2])
			return append(c, make([]byte, 4)...)
		}(), filter.DecodeConfig{}, filter.ErrCorrupt},
		{"over MaxBytes", enc, filter.DecodeConfig{MaxBytes: 64}, filter.ErrTooLarge},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := filter.DecodeWindowed(bytes.NewReader(tc.in), tc.cfg, nil); !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestWindowedForgetsWithoutAdds is the regression test for keys that
// outlived "at most one window longer" when only lookups happened: nothing
// dropped the expired generation, and lookups still consulted it. A key must
// be present up to its expiry (inclusive) and its entry no longer consulted
// past the end of its window, which is less than one window after the
// expiry, with no Add or Expire in between.
func TestWindowedForgetsWithoutAdds(t *testing.T) {
	clock := newFakeClock(clockStart)
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: time.Hour, Generations: 4, Capacity: 1000, FPRate: 0.001, Now: clock.Now})
	keys := filtertest.Emails(200, 95)
	exp := clockStart.Add(7 * time.Minute) // inside the first window of 20 minutes
	for _, k := range keys {
		if err := w.Add(k, exp); err != nil {
			t.Fatal(err)
		}
	}
	clock.Set(exp)
	filtertest.CheckPresent(t, w, keys) // at the expiry, inclusive
	clock.Set(exp.Add(w.Window()))      // one window later: past the window's end
	present := 0
	for _, k := range keys {
		if w.MayContain(k) || w.MayContainString(string(k)) || w.MayContainHash(w.Hash(k)) {
			present++
		}
	}
	// Only false positives may remain: with nothing consulted, none.
	if present > 0 {
		t.Fatalf("%d of %d keys still present a window after their expiry, with %d generations held", present, len(keys), w.Live())
	}
	if w.Live() != 1 {
		t.Fatalf("%d generations held; lookups must not drop them", w.Live())
	}
}

// TestDecodeWindowedMemoryBound is the regression test for an 80-byte
// encoding that passed DecodeConfig.MaxBytes because it held no generation,
// and whose first Add then allocated a 128 GB generation (Capacity 2^36).
// A decoder must refuse a Windowed whose G generations, which adds create as
// keys arrive, could need more than MaxBytes.
func TestDecodeWindowedMemoryBound(t *testing.T) {
	clock := newFakeClock(clockStart)
	cfg := filter.WindowedConfig{MaxTTL: time.Hour, Generations: 4, Capacity: 10_000, FPRate: 0.01, Now: clock.Now}
	empty := encode(t, newWindowed(t, cfg)) // no generation held
	if len(empty) != 80 {
		t.Fatalf("empty encoding is %d bytes, want 80", len(empty))
	}
	huge := bytes.Clone(empty)
	binary.LittleEndian.PutUint64(huge[20+24:], 1<<36) // Capacity
	resealTail(huge)

	full := newWindowed(t, cfg) // all four generations held
	for i := range 4 {
		full.Add([]byte("k"), clockStart.Add(time.Duration(i)*full.Window()))
	}
	if full.Live() != 4 {
		t.Fatalf("%d generations, want 4", full.Live())
	}
	genFrame := uint64(20+40+8+4) + full.GenerationSizing().Bytes()
	one := newWindowed(t, cfg) // one generation held
	one.Add([]byte("k"), clockStart)

	for _, tc := range []struct {
		name     string
		in       []byte
		maxBytes uint64
		want     error
	}{
		{"no generations, capacity 2^36, default limit", huge, 0, filter.ErrTooLarge},
		{"no generations, capacity 2^36, 1 MiB limit", huge, 1 << 20, filter.ErrTooLarge},
		{"no generations, room for three", empty, 3 * genFrame, filter.ErrTooLarge},
		{"no generations, room for four", empty, 4 * genFrame, nil},
		{"one generation, room for three", encode(t, one), 3 * genFrame, filter.ErrTooLarge},
		{"one generation, room for four", encode(t, one), 4 * genFrame, nil},
		{"four generations, room for four", encode(t, full), 4 * genFrame, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := filter.DecodeWindowed(bytes.NewReader(tc.in), filter.DecodeConfig{MaxBytes: tc.maxBytes}, clock.Now)
			if !errors.Is(err, tc.want) || (err == nil) != (tc.want == nil) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
			if err == nil {
				// Fill every generation: memory stays within the limit.
				for i := range 4 {
					if err := w.Add([]byte("x"), clockStart.Add(time.Duration(i)*w.Window())); err != nil {
						t.Fatal(err)
					}
				}
				if b := w.Stats().Bytes; b > tc.maxBytes {
					t.Fatalf("%d bytes of tables after adds, limit %d", b, tc.maxBytes)
				}
			}
		})
	}
}

// FuzzDecodeWindowed feeds arbitrary bytes to the windowed decoder: it must
// return a filter or an error, never panic, and a filter it returns must work
// and re-encode to the same bytes.
func FuzzDecodeWindowed(f *testing.F) {
	w, clock := goldenWindowed(f)
	enc := encode(f, w)
	f.Add(enc)
	f.Add(enc[:90])
	f.Add(resealTail(append(bytes.Clone(enc[:len(enc)-12]), 0, 0, 0, 0)))
	many := newWindowed(f, filter.WindowedConfig{MaxTTL: time.Hour, Generations: 3, Capacity: 200, FPRate: 0.001, Now: clock.Now})
	for i, k := range filtertest.Emails(300, 700) {
		many.Add(k, clockStart.Add(time.Duration(i)*time.Hour/300))
	}
	f.Add(encode(f, many))
	f.Fuzz(func(t *testing.T, in []byte) {
		d, err := filter.DecodeWindowed(bytes.NewReader(in), filter.DecodeConfig{MaxBytes: 1 << 20}, clock.Now)
		if err != nil {
			return
		}
		checkDecoded(t, in, d)
		if err := d.Add([]byte("x"), clock.Now().Add(time.Minute)); err != nil {
			t.Fatalf("Add: %v", err)
		}
		if !d.MayContain([]byte("x")) {
			t.Fatal("decoded filter lost a key")
		}
		if d.Live() > 256 {
			t.Fatalf("%d generations", d.Live())
		}
	})
}

// ExampleWindowed keeps a JWT revocation list: a revoked token id only needs
// remembering until the token itself expires.
func ExampleWindowed() {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now } // a fixed clock for the example; leave Now nil in production

	revoked, err := filter.NewWindowed(filter.WindowedConfig{
		MaxTTL:   24 * time.Hour, // the longest token lifetime
		Capacity: 100_000,        // revocations expiring within one window (24h/7)
		FPRate:   0.001,
		Now:      clock,
	})
	if err != nil {
		panic(err)
	}
	// Revoke two tokens: their "jti" claims, until their "exp" claims.
	revoked.AddString("jti-7f3a", now.Add(15*time.Minute))
	revoked.AddString("jti-91c2", now.Add(20*time.Hour))
	isRevoked := func(jti string) bool {
		// false: certainly not revoked. true: look it up in the database.
		return revoked.MayContainString(jti)
	}
	fmt.Println(isRevoked("jti-7f3a"), isRevoked("jti-91c2"), isRevoked("jti-0000"))

	now = now.Add(16 * time.Hour) // jti-7f3a expired long ago
	dropped, _ := revoked.Expire()
	fmt.Println(dropped, isRevoked("jti-7f3a"), isRevoked("jti-91c2"))

	err = revoked.AddString("jti-c0de", now.Add(48*time.Hour))
	fmt.Println(errors.Is(err, filter.ErrInvalidParams))
	// Output:
	// true true false
	// 1 false true
	// true
}

func BenchmarkWindowed(b *testing.B) {
	for _, n := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprintf("window=%d/p=0.001", n), func(b *testing.B) { benchWindowed(b, n, 0.001) })
	}
}

// benchWindowed fills all 8 generations with n keys each.
func benchWindowed(b *testing.B, n int, p float64) {
	clock := newFakeClock(clockStart.Add(30 * time.Minute))
	cfg := filter.WindowedConfig{MaxTTL: 7 * time.Hour, Capacity: uint64(n), FPRate: p, Now: clock.Now}
	w := newWindowed(b, cfg)
	present := filtertest.Emails(8*n, 1)
	absent := filtertest.Emails(1<<16, 2)
	for i, k := range present {
		w.Add(k, clock.Now().Add(time.Duration(i%8)*time.Hour))
	}
	b.Run("Add", func(b *testing.B) {
		g := newWindowed(b, cfg)
		exp := clock.Now().Add(3 * time.Hour)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			g.Add(present[i%len(present)], exp)
			i++
		}
	})
	b.Run("MayContain/present", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			w.MayContain(present[i%len(present)])
			i++
		}
	})
	b.Run("MayContain/absent", func(b *testing.B) {
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			w.MayContain(absent[i&(1<<16-1)])
			i++
		}
	})
}

// TestWindowedReplayHash: a replayed add whose expiry passed adds nothing;
// one beyond MaxTTL (the clock stepped back since it was recorded) is held
// until its expiry while a generation can hold it, and refused with ErrFull,
// adding nothing, when none can.
func TestWindowedReplayHash(t *testing.T) {
	clock := newFakeClock(clockStart.Add(30 * time.Minute))
	w := newWindowed(t, filter.WindowedConfig{MaxTTL: 3 * time.Hour, Generations: 4, Capacity: 100, Now: clock.Now})
	if err := w.ReplayHash(w.Hash([]byte("old")), clock.Now().Add(-time.Second)); err != nil || w.Items() != 0 {
		t.Fatalf("replay of an expired add: %v, %d items", err, w.Items())
	}
	far := clock.Now().Add(5 * time.Hour) // beyond MaxTTL
	if err := w.AddString("far", far); !errors.Is(err, filter.ErrInvalidParams) {
		t.Fatalf("Add beyond MaxTTL: %v", err)
	}
	if err := w.ReplayHash(w.Hash([]byte("far")), far); err != nil {
		t.Fatalf("ReplayHash beyond MaxTTL with a free generation: %v", err)
	}
	for _, d := range []time.Duration{10 * time.Minute, 70 * time.Minute, 130 * time.Minute} {
		if err := w.AddString(d.String(), clock.Now().Add(d)); err != nil {
			t.Fatal(err)
		}
	}
	if w.Live() != 4 {
		t.Fatalf("%d generations, want 4", w.Live())
	}
	clock.Set(far)
	if !w.MayContainString("far") {
		t.Error("replayed key beyond MaxTTL forgotten before its expiry")
	}
	clock.Set(clockStart.Add(30 * time.Minute))
	if err := w.ReplayHash(w.Hash([]byte("farther")), far.Add(2*time.Hour)); !errors.Is(err, filter.ErrFull) {
		t.Errorf("ReplayHash with every generation taken: %v, want ErrFull", err)
	}
	if ends := w.GenerationEnds(); len(ends) != 4 || !ends[3].Equal(clockStart.Add(6*time.Hour)) {
		t.Errorf("GenerationEnds = %v", ends)
	}
	if w.Generations() != 4 || w.FPRate() != filter.DefaultFPRate {
		t.Errorf("Generations, FPRate = %d, %v", w.Generations(), w.FPRate())
	}
	sz, err := filter.SizeWindowed(100, 0, 4)
	if err != nil || sz != w.GenerationSizing() {
		t.Errorf("SizeWindowed = %+v, %v; the filter's generations are %+v", sz, err, w.GenerationSizing())
	}
}
