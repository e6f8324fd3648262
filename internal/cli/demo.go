package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/bloomgate/bloomgate/internal/demo"
)

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	var cfg demo.Config
	fs.IntVar(&cfg.Users, "users", 1_000_000, "users in the demo table")
	fs.Float64Var(&cfg.MissRatio, "miss-ratio", 0.87, "share of lookups for e-mails that do not exist, in (0, 1]")
	fs.DurationVar(&cfg.Duration, "duration", 10e9, "how long each phase (without, with the gate) runs")
	fs.IntVar(&cfg.Concurrency, "concurrency", 0, "lookup goroutines (default GOMAXPROCS)")
	fs.Float64Var(&cfg.FPRate, "fp", 0.001, "the gate's target false-positive rate")
	fs.StringVar(&cfg.Postgres, "postgres", "", "run against this PostgreSQL (URL) instead of the embedded SQLite")
	fs.StringVar(&cfg.SQLitePath, "sqlite", "", "SQLite file to use (default: a temporary file)")
	fs.BoolVar(&cfg.Keep, "keep", false, "keep the demo table afterwards")
	asJSON := fs.Bool("json", false, "print the results as one JSON object")
	quiet := fs.Bool("quiet", false, "no progress output")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: bloomgate demo [flags]\n\nRuns a lookup workload (most e-mails asked for do not exist) against a users table, without and then with the gate.")
		fs.PrintDefaults()
	}
	if code := parseFlags(fs, args, stderr); code >= 0 {
		return code
	}
	if cfg.Users <= 0 || cfg.Duration <= 0 || cfg.Concurrency < 0 || !(cfg.MissRatio > 0 && cfg.MissRatio <= 1) || !(cfg.FPRate > 0 && cfg.FPRate < 1) {
		fmt.Fprintln(stderr, "bloomgate demo: -users and -duration must be > 0, -miss-ratio in (0, 1], -fp in (0, 1)")
		fs.Usage()
		return exitUsage
	}
	if !*quiet {
		cfg.Progress = stderr
	}
	res, err := demo.Run(ctx, cfg)
	if err != nil {
		fmt.Fprintf(stderr, "bloomgate demo: %v\n", err)
		return exitError
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return exitError
		}
		return exitOK
	}
	printDemo(stdout, res)
	return exitOK
}

func printDemo(w io.Writer, r *demo.Result) {
	fmt.Fprintf(w, "database: %s, %d users, %.0f%% misses, %d goroutines, %.0f s per phase\n\n",
		r.Database, r.Users, 100*r.MissRatio, r.Concurrency, r.DurationSeconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	a, b := r.WithoutGate, r.WithGate
	fmt.Fprintln(tw, "\twithout gate\twith gate\t")
	fmt.Fprintf(tw, "lookups/s\t%.0f\t%.0f\t\n", a.LookupsPerSec, b.LookupsPerSec)
	fmt.Fprintf(tw, "lookups\t%d\t%d\t\n", a.Lookups, b.Lookups)
	fmt.Fprintf(tw, "database queries\t%d\t%d\t\n", a.DBQueries, b.DBQueries)
	fmt.Fprintf(tw, "miss p50 / p95 / p99 (µs)\t%s\t%s\t\n", pcts(a.P50MissUS, a.P95MissUS, a.P99MissUS), pcts(b.P50MissUS, b.P95MissUS, b.P99MissUS))
	fmt.Fprintf(tw, "hit p50 / p95 / p99 (µs)\t%s\t%s\t\n", pcts(a.P50HitUS, a.P95HitUS, a.P99HitUS), pcts(b.P50HitUS, b.P95HitUS, b.P99HitUS))
	fmt.Fprintf(tw, "wrong answers\t%d\t%d\t\n", a.WrongAnswers, b.WrongAnswers)
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "queries avoided\t%d of %d lookups (%.2f%%)\n", r.QueriesAvoided, b.Lookups, 100*r.QueriesAvoidedRatio)
	fmt.Fprintf(tw, "false-positive rate\tobserved %.4f%%, configured %.4f%%\n", 100*r.ObservedFPRate, 100*r.ConfiguredFPRate)
	if b.P95MissUS > 0 {
		fmt.Fprintf(tw, "miss p95 speed-up\t%.0f×\n", a.P95MissUS/b.P95MissUS)
	}
	fmt.Fprintf(tw, "filter\t%s for %d keys\n", humanBytes(r.FilterBytes), r.FilterKeys)
	fmt.Fprintf(tw, "warm-up\t%.3f s (table load %.1f s)\n", r.WarmSeconds, r.LoadSeconds)
	tw.Flush()
}

func pcts(a, b, c float64) string { return fmt.Sprintf("%.1f / %.1f / %.1f", a, b, c) }
