package pgwire

import (
	"context"
	"errors"
	"net/url"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// BenchmarkRelayPgbench runs pgbench (its TPC-B-like transactions, and
// select-only with -S; simple and prepared protocol; every statement
// relayed, none is an answer statement) straight to PostgreSQL and through
// a front end in this process, so that -cpuprofile profiles the front end.
// It reports transactions per second; the run length is
// BLOOMGATE_PGBENCH_TIME (default 10s).
//
//	go test -run XXX -bench RelayPgbench -benchtime 1x ./serve/pgwire
func BenchmarkRelayPgbench(b *testing.B) {
	if _, err := exec.LookPath("pgbench"); err != nil {
		testsvc.Unavailable(b, "pgbench: %v", err)
	}
	f := newFrontEnd(b)
	ctx := context.Background()
	const db = "bloomgate_pgbench"
	admin, err := pgx.Connect(ctx, f.dsn)
	if err != nil {
		b.Fatal(err)
	}
	_, err = admin.Exec(ctx, "CREATE DATABASE "+db)
	admin.Close(ctx)
	var pe *pgconn.PgError
	if err != nil && !(errors.As(err, &pe) && pe.Code == "42P04") {
		b.Fatal(err)
	}
	dur := os.Getenv("BLOOMGATE_PGBENCH_TIME")
	if dur == "" {
		dur = "10s"
	}
	d, err := time.ParseDuration(dur)
	if err != nil {
		b.Fatal(err)
	}
	target := func(dsn string) []string {
		u, _ := url.Parse(dsn)
		return []string{"-h", u.Hostname(), "-p", u.Port(), "-U", u.User.Username()}
	}
	pgbench := func(to []string, args ...string) string {
		out, err := exec.Command("pgbench", append(append(to, args...), db)...).CombinedOutput()
		if err != nil {
			b.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	pgbench(target(f.dsn), "-i", "-q", "-s", "2")
	for _, mode := range []string{"simple", "prepared"} {
		for _, work := range []string{"tpcb", "select"} {
			for _, via := range []string{"direct", "front"} {
				b.Run(mode+"/"+work+"/"+via, func(b *testing.B) {
					to := target(f.dsn)
					if via == "front" {
						to = target(f.front)
					}
					args := []string{"-n", "-c", "4", "-j", "2", "-T", strconv.Itoa(int(d.Seconds())), "-M", mode}
					if work == "select" {
						args = append(args, "-S")
					}
					var tps, cpuPerTx float64
					for b.Loop() {
						cpu0 := processCPU()
						out := pgbench(to, args...)
						cpu := processCPU() - cpu0
						_, rest, ok := strings.Cut(out, "tps = ")
						if !ok {
							b.Fatalf("no tps in:\n%s", out)
						}
						if tps, err = strconv.ParseFloat(strings.Fields(rest)[0], 64); err != nil {
							b.Fatal(err)
						}
						_, rest, _ = strings.Cut(out, "actually processed: ")
						if n, err := strconv.Atoi(strings.Fields(rest)[0]); err == nil && n > 0 {
							cpuPerTx = float64(cpu.Microseconds()) / float64(n)
						}
					}
					b.ReportMetric(tps, "tps")
					// This process's CPU (the front end's, when relaying)
					// per transaction: the relay's cost, whatever else
					// runs on the machine.
					b.ReportMetric(cpuPerTx, "cpu-µs/tx")
				})
			}
		}
	}
}

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
