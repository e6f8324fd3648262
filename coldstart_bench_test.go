package bloomgate

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/filter"
)

// coldChildEnv names the snapshot directory a child process of
// BenchmarkColdStartProcess starts a gate from.
const coldChildEnv = "BLOOMGATE_COLD_CHILD"

func TestMain(m *testing.M) {
	if dir := os.Getenv(coldChildEnv); dir != "" {
		os.Exit(coldChild(dir))
	}
	os.Exit(m.Run())
}

// coldChild is the child process: one Follow from the snapshot in dir, with
// nothing to catch up. It prints the time from the Follow call to Ready.
func coldChild(dir string) int {
	n, _ := strconv.Atoi(os.Getenv("BLOOMGATE_COLD_KEYS"))
	if os.Getenv("BLOOMGATE_COLD_DECODE") != "" { // the decode alone
		cpu0 := cpuTime()
		start := time.Now()
		err := DirSnapshots(dir).Load(context.Background(), func(r io.Reader) error {
			_, _, err := readSnapshot(r, "bench", 0)
			return err
		})
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
		fmt.Printf("ready_ns %d cpu_ns %d\n", time.Since(start).Nanoseconds(), (cpuTime() - cpu0).Nanoseconds())
		return 0
	}
	g, err := New(Config{})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	feed := &benchFeed{n: n, base: coldBase}
	cpu0 := cpuTime()
	start := time.Now()
	go g.Follow(ctx, feed, FollowConfig{Identity: "bench", Snapshots: readOnly{DirSnapshots(dir)}, SnapshotInterval: time.Hour})
	if err := g.WaitReady(ctx); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	took, cpu := time.Since(start), cpuTime()-cpu0
	if g.m.builds.Load() != 0 {
		fmt.Fprintln(os.Stderr, "bootstrapped instead of loading the snapshot")
		return 1
	}
	fmt.Printf("ready_ns %d cpu_ns %d\n", took.Nanoseconds(), cpu.Nanoseconds())
	return 0
}

const coldBase = 1 << 32

// BenchmarkColdStartProcess: a cold start measured in a new process each
// time, as a restarted server sees it: the child execs, loads the newest
// snapshot of BLOOMGATE_COLD_KEYS keys (default 10 M; Bloom at 0.1 %,
// default headroom) from a directory in the page cache, and reports the time
// from its Follow call to WaitReady's return (ms/follow-ready, the median over the
// iterations); ms/exec-ready is from the parent's exec to the child's report,
// and ms-cpu/follow-ready the child's CPU time (user + system, all threads)
// over the same span: on a shared machine it varies far less than wall time.
// BLOOMGATE_COLD_DIR keeps the snapshot in a directory of your choice.
//
//	go test . -run XXX -bench ColdStartProcess -benchtime 20x
func BenchmarkColdStartProcess(b *testing.B) {
	n := 10_000_000
	if s := os.Getenv("BLOOMGATE_COLD_KEYS"); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil {
			b.Fatal(err)
		}
	}
	dir := b.TempDir()
	if d := os.Getenv("BLOOMGATE_COLD_DIR"); d != "" { // keep the snapshot for a profiler
		dir = d
	}
	seed := uint64(0x5eed)
	f, err := NewBloom(uint64(float64(n)*(1+DefaultHeadroom)), DefaultFPRate, seed)
	if err != nil {
		b.Fatal(err)
	}
	feed := &benchFeed{n: n, base: coldBase}
	for i := range n {
		f.AddHash(filter.Hash(feed.key(i), seed))
	}
	if err := DirSnapshots(dir).Save(context.Background(), coldBase, func(w io.Writer) error {
		return writeSnapshot(w, "bench", coldBase, f)
	}); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(f.Stats().Bytes)/(1<<20), "MiB")
	var ready, exe, cpu []time.Duration
	for b.Loop() {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), coldChildEnv+"="+dir, "BLOOMGATE_COLD_KEYS="+strconv.Itoa(n))
		cmd.Stderr = os.Stderr
		out, err := cmd.StdoutPipe()
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		line, err := bufio.NewReader(out).ReadString('\n')
		exe = append(exe, time.Since(start))
		if err := cmd.Wait(); err != nil {
			b.Fatal(err)
		}
		var ns, cns int64
		if _, perr := fmt.Sscanf(line, "ready_ns %d cpu_ns %d", &ns, &cns); err != nil || perr != nil {
			b.Fatalf("child said %q: %v %v", line, err, perr)
		}
		ready, cpu = append(ready, time.Duration(ns)), append(cpu, time.Duration(cns))
	}
	median := func(ds []time.Duration) float64 {
		slices.Sort(ds)
		return float64(ds[len(ds)/2].Microseconds()) / 1000
	}
	b.ReportMetric(median(ready), "ms/follow-ready")
	b.ReportMetric(median(exe), "ms/exec-ready")
	b.ReportMetric(median(cpu), "ms-cpu/follow-ready")
}

// cpuTime is the process's user and system CPU time so far: on a shared
// machine it varies far less than wall time.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
