package pgwire

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/bloomgate/bloomgate/internal/testsvc"
)

// TestUpstreamHealth: the front end checks its upstream: ready with a
// measured round trip when PostgreSQL answers; not ready, with the error,
// when nothing listens there, and a session's client gets 08006.
func TestUpstreamHealth(t *testing.T) {
	f := newFrontEnd(t)
	testsvc.Eventually(t, 10*time.Second, func() bool { return f.srv.Upstream().Ready }, "the upstream never checked ready: %+v", f.srv.Upstream())
	st := f.srv.Upstream()
	if st.LatencySeconds <= 0 || st.CheckedAt.IsZero() || st.Error != "" {
		t.Errorf("a ready upstream: %+v", st)
	}
	if ok, _ := f.srv.Readiness(); !ok {
		t.Error("Readiness: not ready")
	}
	if got := f.gauge(t, "bloomgate_pgwire_upstream_up"); got != 1 {
		t.Errorf("bloomgate_pgwire_upstream_up = %v, want 1", got)
	}

	down := newFrontEnd(t, func(c *Config) { c.Upstream = testsvc.FreeAddr(t) })
	err := down.srv.CheckUpstream(context.Background())
	st = down.srv.Upstream()
	if err == nil || st.Ready || st.Error == "" {
		t.Fatalf("an upstream nobody listens on: %v, %+v", err, st)
	}
	if got := down.gauge(t, "bloomgate_pgwire_upstream_up"); got != 0 {
		t.Errorf("bloomgate_pgwire_upstream_up = %v, want 0", got)
	}
	_, err = pgx.Connect(context.Background(), down.front)
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != "08006" {
		t.Errorf("a session without upstream: %v, want 08006", err)
	}
}

// TestUpstreamLatency: forwarded configured statements' round trips are
// observed, on the simple and the extended protocol.
func TestUpstreamLatency(t *testing.T) {
	f := newFrontEnd(t)
	ctx := context.Background()
	q := "SELECT email, n FROM public." + f.table + " WHERE email = $1"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		cfg, _ := pgx.ParseConfig(f.front)
		cfg.DefaultQueryExecMode = mode
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		before := f.histogramCount(t, "bloomgate_pgwire_upstream_seconds")
		for range 3 {
			if err := c.QueryRow(ctx, q, "k5").Scan(new(string), new(int)); err != nil { // present: forwarded
				t.Fatal(err)
			}
		}
		if got := f.histogramCount(t, "bloomgate_pgwire_upstream_seconds") - before; got != 3 {
			t.Errorf("%v: %d round trips observed, want 3", mode, got)
		}
		c.Close(ctx)
	}
}

func (f *frontEnd) histogramCount(t *testing.T, name string) uint64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n uint64
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				n += m.GetHistogram().GetSampleCount()
			}
		}
	}
	return n
}

func (f *frontEnd) gauge(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := f.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	t.Fatalf("no gauge %s", name)
	return 0
}
