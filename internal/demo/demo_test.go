package demo

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

func checkResult(t *testing.T, r *Result, cfg Config) {
	t.Helper()
	if r.WithoutGate.WrongAnswers != 0 || r.WithGate.WrongAnswers != 0 {
		t.Fatalf("wrong answers: %+v", r)
	}
	if r.WithoutGate.Lookups == 0 || r.WithGate.Lookups == 0 {
		t.Fatalf("no lookups ran: %+v", r)
	}
	// Without the gate every lookup is a query.
	if r.WithoutGate.DBQueries != r.WithoutGate.Lookups {
		t.Fatalf("without gate: %d queries for %d lookups", r.WithoutGate.DBQueries, r.WithoutGate.Lookups)
	}
	// With it, only hits and false positives reach the database: the share
	// avoided is the miss ratio less the FP rate, minus sampling noise.
	// Misses are drawn at random: allow 5 standard deviations of the
	// sample's miss share, plus the FP rate on the low side.
	n := float64(r.WithGate.Lookups)
	tol := 5 * math.Sqrt(cfg.MissRatio*(1-cfg.MissRatio)/n)
	if r.QueriesAvoidedRatio < cfg.MissRatio-tol-cfg.FPRate || r.QueriesAvoidedRatio > cfg.MissRatio+tol {
		t.Fatalf("queries avoided %.4f for miss ratio %.2f over %.0f lookups", r.QueriesAvoidedRatio, cfg.MissRatio, n)
	}
	// The observed rate is a sample of the run's misses, which a loaded
	// machine keeps small (300 ms): allow five standard deviations of it.
	misses := n * cfg.MissRatio
	fpTol := 5 * math.Sqrt(cfg.FPRate*(1-cfg.FPRate)/misses)
	if r.ObservedFPRate > 1.5*cfg.FPRate+0.002+fpTol {
		t.Fatalf("observed FP %.5f over about %.0f misses, configured %g", r.ObservedFPRate, misses, cfg.FPRate)
	}
	if r.FilterKeys != uint64(cfg.Users) || r.FilterBytes == 0 || r.WarmSeconds <= 0 {
		t.Fatalf("filter fields: %+v", r)
	}
}

func TestDemoSQLite(t *testing.T) {
	cfg := Config{Users: 5000, Duration: 300 * time.Millisecond, FPRate: 0.01, Concurrency: 2}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.fill()
	checkResult(t, r, cfg)
	if !strings.HasPrefix(r.Database, "sqlite") {
		t.Fatalf("database %q", r.Database)
	}
}

func TestDemoPostgres(t *testing.T) {
	url := testsvc.Postgres(t)
	cfg := Config{Users: 5000, Duration: 300 * time.Millisecond, FPRate: 0.01, Postgres: url, MissRatio: 0.5,
		Table: fmt.Sprintf("bloomgate_demo_test_%d", time.Now().UnixNano())}
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	cfg.fill()
	checkResult(t, r, cfg)
}

func TestConfigInvalid(t *testing.T) {
	for _, cfg := range []Config{{Users: -1}, {MissRatio: 1.5}, {Concurrency: -3}, {FPRate: 2}, {Duration: -1}} {
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}
