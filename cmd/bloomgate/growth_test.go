package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/changefeed"
	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// TestServeFanoutFollowsRebuilds: three `bloomgate serve` processes from
// one config (all with the database's credentials, as docs/serve.md
// recommends: one feeds, the others stand by, and each serves as an
// instance), fanned out over a Redis stream and over a 3-node JetStream
// cluster, while plain SQL grows the table 4×, from 60 k to 240 k rows, in
// 1,000-row transactions. The feeder rebuilds its filter as it grows. All
// along, each process is sampled: /readyz must say ready (a set not ready
// answers "maybe" to every lookup), BF.MEXISTS of fresh never-inserted keys
// must answer 1 for at most 2× the target rate, and every row of a
// transaction the process has applied (by /readyz's position) must be
// there. Every process serves each newer generation (/readyz's generation
// reaches the newest), swaps it in beside its stream (never ending it to
// reload), ends with one item per row (none applied twice), logs no
// rebuild of its own nor a snapshot it cannot place in the log, and no
// warning or error repeats per transaction. Under -short it is
// skipped (five processes, a NATS cluster, 180 k rows).
func TestServeFanoutFollowsRebuilds(t *testing.T) {
	testsvc.Short(t, "starts PostgreSQL, Redis or NATS, and three servers, and grows a table to 240 k rows")
	for _, engine := range []string{"redis", "jetstream"} {
		t.Run(engine, func(t *testing.T) { fanoutGrowth(t, engine) })
	}
}

// batchAt is a committed insert: rows [from, to) at WAL position pos.
type batchAt struct {
	from, to int
	pos      changefeed.Position
}

func fanoutGrowth(t *testing.T, engine string) {
	bin := buildBinary(t)
	pg := newFollowedDB(t)
	ctx := context.Background()
	sqlPool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer sqlPool.Close()
	insert := func(from, to int) (changefeed.Position, error) {
		if _, err := sqlPool.Exec(ctx, "INSERT INTO users SELECT 'r' || i || '@example.com' FROM generate_series($1::int, $2::int) i", from, to-1); err != nil {
			return 0, err
		}
		var lsn string
		if err := sqlPool.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn); err != nil {
			return 0, err
		}
		return postgres.ParseLSN(lsn)
	}
	const first, rows, txn = 60_000, 240_000, 1_000
	if _, err := insert(0, first); err != nil {
		t.Fatal(err)
	}

	fan := ""
	switch engine {
	case "redis":
		fan = "  fanout redis\n  redis redis://" + startRedis(t) + "/0\n  fanout-unsigned yes\n"
	case "jetstream":
		nats := testsvc.NewNATSCluster(t)
		fan = "  fanout jetstream\n  nats " + nats.URLs() + "\n  replicas 3\n  fanout-unsigned yes\n"
	}
	const fpRate = 0.01
	dir := t.TempDir()
	// max-lag bounds the feed's staleness, a fail-open this test does not
	// measure: under the race detector the feeder's own feed fell more than
	// 5 s behind the 50,000 rows a second in a CI run (every process was
	// not ready for a sample, which the test counts as a swap failing open).
	maxLag := "5s"
	if raceEnabled {
		maxLag = "30s"
	}
	conf := filepath.Join(dir, "bloomgate.conf")
	os.WriteFile(conf, []byte(fmt.Sprintf(`set users {
  postgres %s
  table users
  column email
  slot bg_users
  publication bg_users
  fp-rate %g
  max-lag %s
  snapshot-interval 1s
  lease-ttl 3s
  connect-timeout 10s
%s}
`, pg.DSN, fpRate, maxLag, fan)), 0o644)

	type node struct {
		http string
		srv  *server
		rdb  *redis.Client
	}
	nodes := make([]*node, 3)
	for i := range nodes {
		n := &node{http: freeAddr(t)}
		resp := freeAddr(t)
		n.srv = startServe(t, bin, "-config", conf, "-resp", resp, "-http", n.http, "-data", filepath.Join(dir, fmt.Sprint("serve", i)))
		n.rdb = redis.NewClient(&redis.Options{Addr: resp, Protocol: 2}) // BF.INFO as a flat array
		defer n.rdb.Close()
		nodes[i] = n
		waitReadyz(t, n.http, 60*time.Second)
	}
	defer func() {
		if t.Failed() {
			for i, n := range nodes {
				t.Logf("serve%d stderr (last 8 KB):\n%s", i, lastBytes(n.srv.stderr.String(), 8<<10))
			}
		}
	}()

	info := func(n *node) (capacity, items int64) {
		v, err := n.rdb.Do(ctx, "BF.INFO", "users").Slice()
		if err != nil {
			t.Fatalf("BF.INFO: %v", err)
		}
		for i := 0; i+1 < len(v); i += 2 {
			switch v[i] {
			case "Capacity":
				capacity = v[i+1].(int64)
			case "Number of items inserted":
				items = v[i+1].(int64)
			}
		}
		return capacity, items
	}
	// fp is the share of n never-inserted keys BF.MEXISTS answers 1 for.
	fp := func(nd *node, n int) (float64, error) {
		args := []any{"BF.MEXISTS", "users"}
		for i := range n {
			args = append(args, fmt.Sprintf("never-%d-%d@example.org", time.Now().UnixNano(), i))
		}
		v, err := nd.rdb.Do(ctx, args...).Int64Slice()
		if err != nil {
			return 0, err
		}
		hits := 0
		for _, x := range v {
			hits += int(x)
		}
		return float64(hits) / float64(n), nil
	}

	// The table grows in one goroutine while this one samples every
	// process in turn until it is done.
	var (
		mu        sync.Mutex
		committed []batchAt
	)
	done := make(chan error, 1)
	go func() {
		for from := first; from < rows; from += txn {
			pos, err := insert(from, from+txn)
			if err != nil {
				done <- err
				return
			}
			mu.Lock()
			committed = append(committed, batchAt{from, from + txn, pos})
			mu.Unlock()
			time.Sleep(20 * time.Millisecond) // a steady pace, not one burst
		}
		done <- nil
	}()
	type tally struct {
		samples, notReady, overRate, falseNeg int
		maxRate                               float64
		gens                                  []uint64 // each generation served, in order
	}
	tallies := make([]tally, len(nodes))
	rng := rand.New(rand.NewPCG(1, 2))
	sample := func(i int) {
		n, tl := nodes[i], &tallies[i]
		r, err := getReadyz(n.http)
		if err != nil {
			t.Errorf("serve%d: /readyz: %v", i, err)
			return
		}
		s := r.Sets["users"]
		tl.samples++
		if !s.Ready {
			tl.notReady++
			t.Logf("serve%d not ready: %s (%s)", i, s.State, s.Reason)
		}
		if len(tl.gens) == 0 || tl.gens[len(tl.gens)-1] != s.Generation {
			tl.gens = append(tl.gens, s.Generation)
		}
		applied, err := postgres.ParseLSN(s.Position)
		if err != nil {
			t.Errorf("serve%d: position %q: %v", i, s.Position, err)
			return
		}
		// 10,000 keys a sample: at a true rate of 1.5 % a 2,000-key
		// sample has a standard deviation of 0.27 %, so one sample in a
		// few hundred read 2 % while the filter was within the bound.
		rate, err := fp(n, 10000)
		if err != nil {
			t.Errorf("serve%d: BF.MEXISTS: %v", i, err)
			return
		}
		tl.maxRate = max(tl.maxRate, rate)
		if rate > 2*fpRate {
			tl.overRate++
			t.Logf("serve%d: FP rate %.4f at generation %d (target %g)", i, rate, s.Generation, fpRate)
		}
		// Rows of transactions applied by the position read above: some
		// of every such transaction, all of the newest.
		args := []any{"BF.MEXISTS", "users"}
		mu.Lock()
		for j, b := range committed {
			if b.pos > applied {
				break
			}
			if j == len(committed)-1 || committed[j+1].pos > applied {
				for k := b.from; k < b.to; k++ {
					args = append(args, fmt.Sprintf("r%d@example.com", k))
				}
			} else {
				args = append(args, fmt.Sprintf("r%d@example.com", b.from+rng.IntN(b.to-b.from)))
			}
		}
		mu.Unlock()
		if len(args) == 2 {
			return
		}
		v, err := n.rdb.Do(ctx, args...).Int64Slice()
		if err != nil {
			t.Errorf("serve%d: BF.MEXISTS: %v", i, err)
			return
		}
		for j, x := range v {
			if x != 1 {
				if tl.falseNeg++; tl.falseNeg <= 5 {
					t.Errorf("serve%d: false negative for %v, applied by %v", i, args[j+2], applied)
				}
			}
		}
	}
	for growing := true; growing; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			growing = false
		default:
		}
		for i := range nodes {
			sample(i)
		}
	}
	for i, tl := range tallies {
		t.Logf("serve%d: %d samples, not ready in %d, FP over 2× the target in %d (max %.4f), generations %v",
			i, tl.samples, tl.notReady, tl.overRate, tl.maxRate, tl.gens)
		if tl.notReady > 0 {
			t.Errorf("serve%d was not ready (answering \"maybe\") in %d of %d samples during the growth", i, tl.notReady, tl.samples)
		}
		if tl.falseNeg > 0 {
			t.Errorf("serve%d: %d false negatives during the growth", i, tl.falseNeg)
		}
		if tl.overRate > 0 {
			t.Errorf("serve%d: FP rate over 2× the target (%g) in %d of %d samples (max %.4f)", i, fpRate, tl.overRate, tl.samples, tl.maxRate)
		}
	}

	// Every process serves the newest generation, a filter sized for the
	// table: the feeder's last rebuild, swapped in by every instance.
	newest := uint64(0)
	for i, n := range nodes {
		testsvc.Eventually(t, 60*time.Second, func() bool { return setPosition(t, n.http, "users") >= committed[len(committed)-1].pos },
			"serve%d never applied the last rows", i)
	}
	testsvc.Eventually(t, 30*time.Second, func() bool {
		gens := make([]uint64, len(nodes))
		for i, n := range nodes {
			r, err := getReadyz(n.http)
			if err != nil {
				return false
			}
			gens[i] = r.Sets["users"].Generation
		}
		newest = slices.Max(gens)
		if slices.Min(gens) == newest {
			return true
		}
		time.Sleep(200 * time.Millisecond)
		return false
	}, "the processes never served one generation")
	for i, tl := range tallies {
		// How many rebuilds depends on the pace (a rebuild is sized from
		// what it reads): at least one.
		if tl.gens[0] >= newest {
			t.Errorf("serve%d: generations %v, then %d: want a rebuild while the table grew 4×", i, tl.gens, newest)
		}
	}
	for i, n := range nodes {
		c, it := info(n)
		rate, err := fp(n, 5000)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("serve%d: generation %d, capacity %d, items %d, FP rate %.4f (target %g)", i, newest, c, it, rate, fpRate)
		if it != rows {
			// More: a transaction applied twice (a delete twice would be a
			// false negative in a filter that removes).
			t.Errorf("serve%d: %d items for %d rows", i, it, rows)
		}
		if c < it || rate > 2*fpRate {
			t.Errorf("serve%d does not serve a filter sized for the table: capacity %d for %d items, FP rate %.4f (target %g)", i, c, it, rate, fpRate)
		}
	}
	// No row absent on any process.
	for i, n := range nodes {
		args := []any{"BF.MEXISTS", "users"}
		for k := 0; k < rows; k += 97 {
			args = append(args, fmt.Sprintf("r%d@example.com", k))
		}
		v, err := n.rdb.Do(ctx, args...).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		for j, x := range v {
			if x != 1 {
				t.Errorf("serve%d: false negative for %v", i, args[j+2])
			}
		}
	}
	for i, n := range nodes {
		log := n.srv.stderr.String()
		// Newer filters are swapped in beside the stream: never a stream
		// ended to reload one (failing open meanwhile).
		for _, bad := range []string{"rebuild from the change feed failed", "no log cursor known",
			"loads the feeder's newer filter", "could not be swapped in beside the stream"} {
			if c := strings.Count(log, bad); c > 0 {
				t.Errorf("serve%d logged %q %d times", i, bad, c)
			}
		}
		if c := strings.Count(log, "swapped in the newer filter"); c == 0 {
			t.Errorf("serve%d never swapped in a newer filter", i)
		} else {
			t.Logf("serve%d swapped in %d newer filters", i, c)
		}
		// A warning or error that repeats is logged once with a count,
		// not per transaction (180 of them here).
		for msg, c := range warnings(log) {
			if c > 5 {
				t.Errorf("serve%d logged %q %d times", i, msg, c)
			}
		}
	}
}

// warnings counts the WARN and ERROR lines of a slog text log by message.
func warnings(log string) map[string]int {
	m := map[string]int{}
	for line := range strings.Lines(log) {
		if !strings.Contains(line, "level=WARN") && !strings.Contains(line, "level=ERROR") {
			continue
		}
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = line[i+len("msg="):]
			if strings.HasPrefix(msg, `"`) {
				if j := strings.Index(msg[1:], `"`); j >= 0 {
					msg = msg[1 : j+1]
				}
			} else if j := strings.IndexByte(msg, ' '); j >= 0 {
				msg = msg[:j]
			}
		}
		m[strings.TrimSpace(msg)]++
	}
	return m
}

// lastBytes returns the last n bytes of s.
func lastBytes(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
