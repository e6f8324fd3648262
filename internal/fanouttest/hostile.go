package fanouttest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate"
	"github.com/bloomgate/bloomgate/changefeed"
)

// HealWithin is how long a set may take to be ready again, serving new
// rows on every instance, after a hostile message, without an operator.
const HealWithin = 20 * time.Second

// Hostile runs writers against the table and checks every committed row
// on every instance (MayContainAt with its token, MayContain once the row is
// older than maxLag) while inject damages the log; a row committed right
// after it must be served by every instance, ready, within HealWithin.
func Hostile(t *testing.T, pg *PG, maxLag time.Duration, insts []*bloomgate.Gate, inject func()) {
	t.Helper()
	type row struct {
		key   string
		token changefeed.Position
		at    time.Time
	}
	var mu sync.Mutex
	var rows []row
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	wg.Go(func() {
		for n := 0; ctx.Err() == nil; n++ {
			key := fmt.Sprintf("h%d@x", n)
			tok, err := pg.Insert(ctx, key)
			if err != nil {
				continue
			}
			mu.Lock()
			rows = append(rows, row{key, tok, time.Now()})
			mu.Unlock()
			time.Sleep(5 * time.Millisecond)
		}
	})
	var fn, fnAt, checked int
	check := func() {
		mu.Lock()
		all := rows
		mu.Unlock()
		for i, g := range insts {
			for _, r := range all {
				checked++
				if !g.MayContainAt([]byte(r.key), r.token) {
					fnAt++
					if fnAt <= 3 {
						t.Errorf("FALSE NEGATIVE: instance %d: MayContainAt(%q, %v) at position %v", i, r.key, r.token, g.Position())
					}
				}
				if time.Since(r.at) > maxLag+time.Second && !g.MayContain([]byte(r.key)) {
					fn++
					if fn <= 3 {
						t.Errorf("FALSE NEGATIVE: instance %d: MayContain(%q) committed %v ago", i, r.key, time.Since(r.at).Round(time.Millisecond))
					}
				}
			}
		}
	}
	for range 20 {
		check()
		time.Sleep(25 * time.Millisecond)
	}
	inject()
	injected := time.Now()
	// Healed: a row committed now is served by every instance, ready.
	key := "healed@x"
	tok, err := pg.Insert(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	var healed time.Duration
	for healed == 0 || time.Since(injected) < 3*time.Second {
		check()
		ok := true
		for _, g := range insts {
			if !g.Ready() || g.Position() < tok || !g.MayContain([]byte(key)) {
				ok = false
			}
		}
		if ok && healed == 0 {
			healed = time.Since(injected)
		}
		if healed == 0 && time.Since(injected) > HealWithin {
			t.Errorf("the set is not serving new rows %v after the hostile message", HealWithin)
			break
		}
		time.Sleep(25 * time.Millisecond)
	}
	stop()
	wg.Wait()
	check()
	t.Logf("%d lookups checked, %d MayContainAt and %d MayContain false negatives; ready with new rows %v after the message",
		checked, fnAt, fn, healed.Round(time.Millisecond))
}
