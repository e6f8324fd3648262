package bloomgate

import (
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// stripedCounts counts lookups without making every core write one cache
// line: the key's hash picks one of eight stripes.
type stripedCounts struct {
	s [8]struct {
		maybe, absent atomic.Uint64
		_             [48]byte
	}
}

func (c *stripedCounts) add(h uint64, present bool) {
	s := &c.s[h>>61]
	if present {
		s.maybe.Add(1)
	} else {
		s.absent.Add(1)
	}
}

// sum returns all lookups and the absent ones.
func (c *stripedCounts) sum() (lookups, absent uint64) {
	for i := range c.s {
		m, a := c.s[i].maybe.Load(), c.s[i].absent.Load()
		lookups += m + a
		absent += a
	}
	return lookups, absent
}

// metrics holds the gate's counters and exposes them, with the filter's
// stats, as a Prometheus collector. The filter is read once per scrape.
type metrics struct {
	g            *Gate
	lookups      stripedCounts
	failOpen     [4]atomic.Uint64 // by State
	failOpenLong atomic.Uint64
	fetches      atomic.Uint64
	emptyFetches atomic.Uint64
	adds         atomic.Uint64
	removes      atomic.Uint64
	removeMisses atomic.Uint64
	builds       atomic.Uint64

	buildSeconds *prometheus.HistogramVec
	buildsTotal  *prometheus.CounterVec

	dLookups, dAbsent, dFailOpen, dFetches, dEmpty, dAdds, dRemoves, dRemoveMisses,
	dObservedFP, dEstimatedFP, dConfiguredFP, dItems, dDistinct, dFill, dBytes, dCapacity,
	dState, dUnhonoured *prometheus.Desc
}

func newMetrics(g *Gate) *metrics {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("bloomgate_"+name, help, labels, nil)
	}
	return &metrics{
		g: g,
		buildSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bloomgate_build_duration_seconds",
			Help:    "Time to build a filter from the source (warm-up or rebuild).",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}, []string{"kind"}),
		buildsTotal: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_builds_total",
			Help: "Filter builds by kind (warm, rebuild) and result (ok, error).",
		}, []string{"kind", "result"}),
		dLookups:      d("lookups_total", "Lookups answered from the filter."),
		dAbsent:       d("absent_total", "Lookups the filter answered 'definitely absent' (database queries avoided)."),
		dFailOpen:     d("fail_open_total", "Lookups sent to the database because the gate could not be sure, by reason.", "reason"),
		dFetches:      d("fetches_total", "Database fetches made by Lookup, after coalescing."),
		dEmpty:        d("empty_fetches_total", "Fetches after a 'maybe' that found no row (observed false positives)."),
		dAdds:         d("adds_total", "Keys added."),
		dRemoves:      d("removes_total", "Keys removed."),
		dRemoveMisses: d("remove_misses_total", "Removes the filter rejected because the key was not in it (deletes out of step with adds)."),
		dObservedFP:   d("observed_fp_ratio", "Empty fetches / (absent answers + empty fetches)."),
		dEstimatedFP:  d("estimated_fp_ratio", "False-positive rate estimated from the filter's fill."),
		dConfiguredFP: d("configured_fp_ratio", "Target false-positive rate."),
		dItems:        d("filter_items", "Keys added to the serving filter, duplicates included."),
		dDistinct:     d("filter_distinct_estimate", "Distinct keys in the serving filter, estimated from its fill."),
		dFill:         d("filter_fill_ratio", "Fraction of the serving filter's bits or slots in use."),
		dBytes:        d("filter_bytes", "Memory held by the serving filter."),
		dCapacity:     d("filter_capacity", "Keys the serving filter was sized for."),
		dState:        d("state", "1 for the gate's current state.", "state"),
		dUnhonoured:   d("unhonoured_removes", "Removes the filter could not apply since the last build."),
	}
}

func (m *metrics) observeBuild(kind string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	m.buildSeconds.WithLabelValues(kind).Observe(d.Seconds())
	m.buildsTotal.WithLabelValues(kind, result).Inc()
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.dLookups, m.dAbsent, m.dFailOpen, m.dFetches, m.dEmpty, m.dAdds,
		m.dRemoves, m.dRemoveMisses, m.dObservedFP, m.dEstimatedFP, m.dConfiguredFP, m.dItems, m.dDistinct,
		m.dFill, m.dBytes, m.dCapacity, m.dState, m.dUnhonoured} {
		ch <- d
	}
	m.buildSeconds.Describe(ch)
	m.buildsTotal.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.g.Stats()
	c := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gv := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	c(m.dLookups, s.Lookups)
	c(m.dAbsent, s.Absent)
	for st := range m.failOpen {
		if State(st) != StateReady && State(st) != StateRebuilding {
			c(m.dFailOpen, m.failOpen[st].Load(), State(st).String())
		}
	}
	c(m.dFailOpen, m.failOpenLong.Load(), "key_too_long")
	c(m.dFetches, s.Fetches)
	c(m.dEmpty, s.EmptyFetches)
	c(m.dAdds, m.adds.Load())
	c(m.dRemoves, m.removes.Load())
	c(m.dRemoveMisses, m.removeMisses.Load())
	gv(m.dObservedFP, s.ObservedFPRate)
	gv(m.dEstimatedFP, s.Filter.EstimatedFPRate)
	gv(m.dConfiguredFP, s.ConfiguredFPRate)
	gv(m.dItems, float64(s.Filter.Items))
	gv(m.dDistinct, s.Filter.EstimatedDistinct)
	gv(m.dFill, s.Filter.FillRatio)
	gv(m.dBytes, float64(s.Filter.Bytes))
	gv(m.dCapacity, float64(s.Filter.Capacity))
	gv(m.dUnhonoured, float64(s.UnhonouredRemoves))
	for st := StateWarming; st <= StateDegraded; st++ {
		v := 0.0
		if st == s.State {
			v = 1
		}
		gv(m.dState, v, st.String())
	}
	m.buildSeconds.Collect(ch)
	m.buildsTotal.Collect(ch)
}
