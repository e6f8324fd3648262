package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/bloomgate/bloomgate/internal/testsvc"
	"github.com/bloomgate/bloomgate/source/postgres"
)

// Benchmarks of `bloomgate serve` following a change feed, on the built
// binary and a private PostgreSQL cluster (docs/benchmarks.md has the
// commands and figures).

// BenchmarkServeCommitToVisible: a writer inserts rows at 1,000 a second
// (one autocommit INSERT each); for every tenth, a prober asks BF.EXISTS
// every 0.5 ms from the moment the commit returned until the row is
// visible. Reports the p50 and p99 of commit-to-visible. b.N is the number
// of inserts (use -benchtime=10000x).
func BenchmarkServeCommitToVisible(b *testing.B) {
	bin := buildBinary(b)
	pg := newFollowedDB(b)
	conf, respAddr, httpAddr, _ := followConf(b, pg.DSN, "")
	srv := startServe(b, bin, "-config", conf)
	waitReadyz(b, httpAddr, 60*time.Second)
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, pg.DSN)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	rdb := redis.NewClient(&redis.Options{Addr: respAddr, PoolSize: 64})
	defer rdb.Close()
	var (
		mu   sync.Mutex
		lags []time.Duration
		wg   sync.WaitGroup
	)
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if d := time.Until(start.Add(time.Duration(i) * time.Millisecond)); d > 0 {
			time.Sleep(d)
		}
		key := fmt.Sprintf("lag%d@example.com", i)
		if _, err := pool.Exec(ctx, "INSERT INTO users VALUES ($1)", key); err != nil {
			b.Fatal(err)
		}
		if i%10 != 0 {
			continue
		}
		committed := time.Now()
		wg.Go(func() {
			for time.Since(committed) < 30*time.Second {
				if ok, err := rdb.Do(ctx, "BF.EXISTS", "users", key).Bool(); err == nil && ok {
					mu.Lock()
					lags = append(lags, time.Since(committed))
					mu.Unlock()
					return
				}
				time.Sleep(500 * time.Microsecond)
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	elapsed := time.Since(start)
	slices.Sort(lags)
	if len(lags) == 0 {
		b.Fatalf("no row became visible; server log:\n%s", srv.stderr)
	}
	q := func(p float64) float64 { return float64(lags[int(p*float64(len(lags)-1))]) / 1e6 }
	b.ReportMetric(q(0.5), "p50-ms")
	b.ReportMetric(q(0.99), "p99-ms")
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "inserts/s")
}

// benchKeys is the table size of the restart and join benchmarks:
// BLOOMGATE_BENCH_KEYS, default 10,000,000.
func benchKeys(b *testing.B) int {
	if v := os.Getenv("BLOOMGATE_BENCH_KEYS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("BLOOMGATE_BENCH_KEYS=%q", v)
		}
		return n
	}
	return 10_000_000
}

// bigTable fills the users table with n keys.
func bigTable(b testing.TB, dsn string, n int) {
	b.Helper()
	ctx := context.Background()
	pool, err := postgres.Connect(ctx, dsn)
	if err != nil {
		b.Fatal(err)
	}
	defer pool.Close()
	start := time.Now()
	for lo := 0; lo < n; lo += 1_000_000 {
		hi := min(lo+1_000_000, n) - 1
		if _, err := pool.Exec(ctx, "INSERT INTO users SELECT 'user' || i || '@example.com' FROM generate_series($1::int, $2::int) i", lo, hi); err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("loaded %d keys in %v", n, time.Since(start).Round(time.Second))
}

// startStages is one start of the server, stage by stage.
type startStages struct {
	listening time.Duration // exec → "listening" on stdout (serving: every set answers "maybe")
	connect   time.Duration // the sets' servers connected and checked (log "sets connected")
	snapshot  time.Duration // the snapshot loaded (log "snapshot loaded"; 0 if none was)
	ready     time.Duration // exec → /readyz 200
	// sideBySide: the snapshot was loaded beside the connect stage.
	sideBySide bool
	catchup    time.Duration // the sum of rest() over the starts added
}

// rest is what the stages do not account for: the replication connection
// (or the stream's) and catching up with the head, plus the 1 ms /readyz
// polling. A followed set's snapshot is loaded beside the connect stage
// (both start as the server listens), a fan-out instance's after it.
func (s startStages) rest() time.Duration {
	if s.sideBySide {
		return s.ready - s.listening - max(s.connect, s.snapshot)
	}
	return s.ready - s.listening - s.connect - s.snapshot
}

func (s *startStages) add(o startStages) {
	s.listening += o.listening
	s.connect += o.connect
	s.snapshot += o.snapshot
	s.ready += o.ready
	s.catchup += o.rest()
}

// report reports the mean of n starts' stages.
func (s startStages) report(b *testing.B, n int) { s.reportAs(b, n, "") }

// reportAs reports the mean of n starts' stages, each unit suffixed with
// "/"+name unless name is "".
func (s startStages) reportAs(b *testing.B, n int, name string) {
	ms := func(d time.Duration) float64 { return float64(d) / float64(n) / 1e6 }
	if name != "" {
		name = "/" + name
	}
	b.ReportMetric(ms(s.ready), "ms-to-ready"+name)
	b.ReportMetric(ms(s.listening), "ms-listening"+name)
	b.ReportMetric(ms(s.connect), "ms-connect"+name)
	b.ReportMetric(ms(s.snapshot), "ms-snapshot"+name)
	b.ReportMetric(ms(s.catchup), "ms-catchup"+name)
}

// benchBinary is a build a start benchmark runs.
type benchBinary struct{ name, path string }

// benchBinaries returns the builds to compare: BLOOMGATE_BENCH_BINARIES,
// "name=path,name=path…" (each iteration starts every one in turn, so a
// shared machine's load falls on all alike), else this tree's build
// alone (its metrics unsuffixed).
func benchBinaries(b *testing.B) []benchBinary {
	v := os.Getenv("BLOOMGATE_BENCH_BINARIES")
	if v == "" {
		return []benchBinary{{"", buildBinary(b)}}
	}
	var bins []benchBinary
	for _, item := range strings.Split(v, ",") {
		name, path, ok := strings.Cut(item, "=")
		if !ok || name == "" || strings.ContainsAny(name, " \t/") {
			b.Fatalf("BLOOMGATE_BENCH_BINARIES: %q is not name=path", item)
		}
		if _, err := os.Stat(path); err != nil {
			b.Fatalf("BLOOMGATE_BENCH_BINARIES: %v", err)
		}
		bins = append(bins, benchBinary{name, path})
	}
	return bins
}

var (
	connectedLog = regexp.MustCompile(`msg="sets connected" .*\bseconds=([0-9.e+-]+)`)
	snapshotLog  = regexp.MustCompile(`msg="bloomgate: snapshot loaded" .*\bseconds=([0-9.e+-]+)`)
)

// logSeconds returns the seconds= of the first log line re matches.
func logSeconds(re *regexp.Regexp, log string) (time.Duration, bool) {
	m := re.FindStringSubmatch(log)
	if m == nil {
		return 0, false
	}
	f, err := strconv.ParseFloat(m[1], 64)
	return time.Duration(f * float64(time.Second)), err == nil
}

// timeToReady starts the server with args and returns its stages, from
// exec to /readyz 200, then stops it with SIGTERM (its final snapshot).
func timeToReady(b testing.TB, bin, httpAddr string, args ...string) startStages {
	b.Helper()
	var st startStages
	start := time.Now()
	srv := startServe(b, bin, args...) // returns at "listening"
	st.listening = time.Since(start)
	for {
		if r, err := getReadyz(httpAddr); err == nil && r.Ready {
			break
		}
		if time.Since(start) > 5*time.Minute {
			b.Fatalf("not ready after 5 minutes:\n%s", srv.stderr)
		}
		time.Sleep(time.Millisecond)
	}
	st.ready = time.Since(start)
	srv.cmd.Process.Signal(syscall.SIGTERM)
	srv.wait()
	log := srv.stderr.String()
	if dir := os.Getenv("BLOOMGATE_BENCH_LOGS"); dir != "" {
		// Each start's log, for reading the stages' log lines.
		f, err := os.CreateTemp(dir, "start-*.log")
		if err != nil {
			b.Fatal(err)
		}
		f.WriteString(log)
		f.Close()
	}
	var ok bool
	if st.connect, ok = logSeconds(connectedLog, log); !ok {
		b.Fatalf("no \"sets connected\" line in the log:\n%s", log)
	}
	st.snapshot, _ = logSeconds(snapshotLog, log)
	return st
}

// BenchmarkServeRestart: exec to /readyz 200 of a server restarting on a
// followed set of BLOOMGATE_BENCH_KEYS keys from its snapshot in the data
// directory, by stage: exec → listening (every set answers "maybe"), the
// checks against PostgreSQL (a connection, wal_level, the publication),
// the snapshot load, and the rest (the replication connection and
// catching up with the feed's head).
//
// With BLOOMGATE_BENCH_BINARIES (name=path,…) it restarts each build in
// turn on the same set and data directory, and reports each build's
// stages with its name appended to the units.
func BenchmarkServeRestart(b *testing.B) {
	bins := benchBinaries(b)
	pg := newFollowedDB(b)
	bigTable(b, pg.DSN, benchKeys(b))
	conf, _, httpAddr, _ := followConf(b, pg.DSN, "")
	first := timeToReady(b, bins[0].path, httpAddr, "-config", conf)
	b.Logf("first start (bootstrap from the table): %v", first.ready.Round(time.Millisecond))
	b.ResetTimer()
	totals := make([]startStages, len(bins))
	for i := range b.N {
		for j := range bins {
			k := (i + j) % len(bins) // each build goes first as often
			st := timeToReady(b, bins[k].path, httpAddr, "-config", conf)
			st.sideBySide = true
			totals[k].add(st)
		}
	}
	for k, bin := range bins {
		totals[k].reportAs(b, b.N, bin.name)
	}
}

// BenchmarkServeJoin: exec to /readyz 200 of a new instance-only process
// (no database credentials, no local snapshot) joining a set of
// BLOOMGATE_BENCH_KEYS keys fanned out over a private single-node
// JetStream: it loads the feeder's newest snapshot from the object store
// and replays the stream after it.
func BenchmarkServeJoin(b *testing.B) {
	bin, instConf := fanoutBench(b)
	b.ResetTimer()
	var total startStages
	for range b.N {
		h := freeAddr(b)
		total.add(timeToReady(b, bin, h, "-config", instConf, "-resp", freeAddr(b), "-http", h, "-data", ""))
	}
	total.report(b, b.N)
}

// BenchmarkServeInstanceRestart: exec to /readyz 200 of an instance-only
// process restarting from the snapshot in its data directory (written
// when it last stopped) on a set of BLOOMGATE_BENCH_KEYS keys fanned out
// over a private single-node JetStream: it loads the local snapshot and
// replays the stream after it.
func BenchmarkServeInstanceRestart(b *testing.B) {
	bin, instConf := fanoutBench(b)
	data := filepath.Join(b.TempDir(), "instance")
	h := freeAddr(b)
	args := []string{"-config", instConf, "-resp", freeAddr(b), "-http", h, "-data", data}
	first := timeToReady(b, bin, h, args...) // joins, and leaves its snapshot
	b.Logf("first start (a join from the object store): %v", first.ready.Round(time.Millisecond))
	b.ResetTimer()
	var total startStages
	for range b.N {
		total.add(timeToReady(b, bin, h, args...))
	}
	total.report(b, b.N)
}

// fanoutBench fills a table of BLOOMGATE_BENCH_KEYS keys, starts a private
// single-node JetStream and a feeder process fanning the table's set out
// over it, waits for the feeder's first snapshot in the object store, and
// returns the binary and an instance-only config of the set.
func fanoutBench(b *testing.B) (bin, instConf string) {
	bin = buildBinary(b)
	pg := newFollowedDB(b)
	bigTable(b, pg.DSN, benchKeys(b))
	natsBin := testsvc.Binary(b, "nats-server")
	natsAddr := freeAddr(b)
	_, port, _ := strings.Cut(natsAddr, ":")
	nats := exec.Command(natsBin, "-a", "127.0.0.1", "-p", port, "-js", "-sd", b.TempDir())
	if err := nats.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { nats.Process.Kill(); nats.Wait() })
	time.Sleep(time.Second)
	dir := b.TempDir()
	block := func(withDB bool) string {
		db := ""
		if withDB {
			db = "  postgres " + pg.DSN + "\n  slot bg_users\n  publication bg_users\n"
		}
		return "set users {\n" + db + "  table users\n  column email\n  fanout jetstream\n  fanout-unsigned yes\n  nats nats://" + natsAddr +
			"\n  snapshot-interval 1s\n  connect-timeout 10s\n}\n"
	}
	feederConf := filepath.Join(dir, "feeder.conf")
	os.WriteFile(feederConf, []byte(block(true)), 0o644)
	instConf = filepath.Join(dir, "instance.conf")
	os.WriteFile(instConf, []byte(block(false)), 0o644)
	fHTTP := freeAddr(b)
	feeder := startServe(b, bin, "-config", feederConf, "-resp", freeAddr(b), "-http", fHTTP, "-data", filepath.Join(dir, "feeder"))
	waitReadyz(b, fHTTP, 5*time.Minute)
	testsvc.Eventually(b, 30*time.Second, func() bool { return strings.Contains(feeder.stderr.String(), "snapshot") }, "no snapshot")
	time.Sleep(3 * time.Second) // the feeder's first snapshot upload
	return bin, instConf
}
