// Command compare measures bloomgate's filter.Bloom side by side with other Go
// filters and prints a markdown table of the results and of the targets.
//
//	cd bench && go run ./cmd/compare -md
//	cd bench && go run ./cmd/compare -quick   # n = 100k only, a smoke test
//	cd bench && go run ./cmd/compare -families -md   # Scalable, Counting, Cuckoo vs their peers
package main

import (
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/bloomgate/bloomgate/bench"
)

func main() {
	var (
		ns        = flag.String("n", "1000000,10000000", "comma-separated key counts")
		ps        = flag.String("p", "0.01,0.001", "comma-separated target false-positive rates")
		absent    = flag.Int("absent", bench.DefaultAbsent, "absent keys to measure false positives on")
		benchTime = flag.Duration("benchtime", 300*time.Millisecond, "time per measurement")
		count     = flag.Int("count", 3, "rounds of timings; the table shows medians")
		quick     = flag.Bool("quick", false, "smoke test: n = 100000 only, one round of 200ms per measurement")
		md        = flag.Bool("md", false, "print markdown tables instead of aligned text")
		families  = flag.Bool("families", false, "compare the other filter families (Scalable, Counting, Cuckoo) with their peers instead of Bloom; -p is ignored")
	)
	flag.Parse()
	cfg := bench.Config{Absent: *absent, BenchTime: *benchTime, Count: *count, Progress: os.Stderr}
	var err error
	if cfg.N, err = parseList(*ns, strconv.Atoi); err != nil {
		fatal(fmt.Errorf("-n: %w", err))
	}
	if cfg.P, err = parseList(*ps, func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }); err != nil {
		fatal(fmt.Errorf("-p: %w", err))
	}
	if *quick {
		cfg.N = []int{100_000}
		cfg.BenchTime = 200 * time.Millisecond
		cfg.Count = 1
	}
	start := time.Now()
	if *families {
		rows, err := bench.RunFamilies(bench.FamilyConfig{N: cfg.N, Absent: cfg.Absent, BenchTime: cfg.BenchTime, Count: cfg.Count, Progress: os.Stderr})
		if err != nil {
			fatal(err)
		}
		printEnv(cfg, start)
		fmt.Println(bench.FamilyTable(rows, *md))
		fmt.Print(bench.TargetsTable(bench.FamilyTargets(rows), *md))
		return
	}
	rows, err := bench.Run(cfg)
	if err != nil {
		fatal(err)
	}
	printEnv(cfg, start)
	fmt.Println(bench.Table(rows, *md))
	fmt.Print(bench.TargetsTable(bench.Targets(rows), *md))
}

func printEnv(cfg bench.Config, start time.Time) {
	fmt.Printf("cpu: %s, %d cores, GOMAXPROCS %d, %s %s/%s; %d absent keys; median of %d × %v per measurement; run took %v\n\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH,
		cfg.Absent, cfg.Count, cfg.BenchTime, time.Since(start).Round(time.Second))
}

func parseList[T any](s string, parse func(string) (T, error)) ([]T, error) {
	var out []T
	for f := range strings.SplitSeq(s, ",") {
		v, err := parse(strings.TrimSpace(f))
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// cpuModel returns the CPU's model name from /proc/cpuinfo, or "unknown".
func cpuModel() string {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		return "unknown"
	}
	for line := range strings.Lines(string(b)) {
		if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "compare:", err)
	os.Exit(1)
}
