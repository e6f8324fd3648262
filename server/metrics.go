package server

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bloomgate/bloomgate/internal/version"
	"github.com/bloomgate/bloomgate/serve"
	"github.com/bloomgate/bloomgate/serve/resp"
)

// setCollector exports each table-backed set's readiness, mode and role
// (the gate's own metrics, labelled set, carry its lag and position), and
// the build. Each scrape reads every set's Status once.
type setCollector struct{ store *serve.Store }

var (
	descSetReady = prometheus.NewDesc("bloomgate_serve_set_ready",
		"1 when the table-backed set answers \"absent\" from its filter; 0 while it fails open.", []string{"set"}, nil)
	descSetRole = prometheus.NewDesc("bloomgate_serve_set_role",
		"1 for this process's role in keeping the set in step: none (rebuild-only), follower, feeder, standby or instance.", []string{"set", "role"}, nil)
	descSetMode = prometheus.NewDesc("bloomgate_serve_set_mode",
		"1 for how the set learns of the table's rows: follow (change feed) or rebuild (rebuild-only).", []string{"set", "mode"}, nil)
	descSetPosition = prometheus.NewDesc("bloomgate_serve_set_position",
		"Change-feed position the set has applied (PostgreSQL LSN as a number); 0 when rebuild-only.", []string{"set"}, nil)
	descSetLag = prometheus.NewDesc("bloomgate_serve_set_lag_seconds",
		"How far the set's applied position is behind the feed's head.", []string{"set"}, nil)
	descBuildInfo = prometheus.NewDesc("bloomgate_serve_build_info",
		"1, labelled with the running build.", []string{"version", "revision", "go_version"}, nil)
)

var allRoles = []serve.Role{serve.RoleNone, serve.RoleFollower, serve.RoleFeeder, serve.RoleStandby, serve.RoleInstance}

func (c setCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSetReady, descSetRole, descSetMode, descSetPosition, descSetLag, descBuildInfo} {
		ch <- d
	}
}

func (c setCollector) Collect(ch chan<- prometheus.Metric) {
	b2f := func(b bool) float64 {
		if b {
			return 1
		}
		return 0
	}
	for _, name := range c.store.SetNames() {
		st, ok := c.store.SetStatus(name)
		if !ok {
			continue
		}
		ch <- prometheus.MustNewConstMetric(descSetReady, prometheus.GaugeValue, b2f(st.Ready), name)
		for _, r := range allRoles {
			ch <- prometheus.MustNewConstMetric(descSetRole, prometheus.GaugeValue, b2f(r == st.Role), name, r.String())
		}
		for _, m := range []serve.Mode{serve.ModeRebuild, serve.ModeFollow} {
			ch <- prometheus.MustNewConstMetric(descSetMode, prometheus.GaugeValue, b2f(m == st.Mode), name, m.String())
		}
		ch <- prometheus.MustNewConstMetric(descSetPosition, prometheus.GaugeValue, float64(st.Position), name)
		ch <- prometheus.MustNewConstMetric(descSetLag, prometheus.GaugeValue, st.Lag.Seconds(), name)
	}
	v := version.Get()
	ch <- prometheus.MustNewConstMetric(descBuildInfo, prometheus.GaugeValue, 1, v.Version, v.Revision, v.GoVersion)
}

// registerServerMetrics exports the store's and the RESP server's counters.
func registerServerMetrics(reg prometheus.Registerer, store *serve.Store, srv *resp.Server) error {
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, f)
	}
	counter := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Name: name, Help: help}, f)
	}
	for _, c := range []prometheus.Collector{
		gauge("bloomgate_serve_used_memory_bytes", "Bytes held by standalone filters.", func() float64 { return float64(store.UsedMemory()) }),
		gauge("bloomgate_serve_keys", "Keys in the keyspace, table-backed sets included.", func() float64 { return float64(store.Len()) }),
		gauge("bloomgate_serve_ready", "1 when every table-backed set is ready.", func() float64 {
			if store.Ready() {
				return 1
			}
			return 0
		}),
		gauge("bloomgate_serve_resp_connections", "Open Redis protocol connections.", func() float64 { return float64(srv.Stats().Connections) }),
		counter("bloomgate_serve_resp_connections_total", "Accepted Redis protocol connections.", func() float64 { return float64(srv.Stats().ConnectionsTotal) }),
		counter("bloomgate_serve_resp_rejected_connections_total", "Connections refused by maxclients.", func() float64 { return float64(srv.Stats().ConnectionsRejected) }),
		counter("bloomgate_serve_resp_commands_total", "Redis protocol commands processed.", func() float64 { return float64(srv.Stats().Commands) }),
	} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("metrics: %w", err)
		}
	}
	return nil
}
