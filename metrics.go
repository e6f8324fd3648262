package bloomgate

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics holds the gate's counters.
type metrics struct {
	lookups      *lookupCounts
	failOpen     [4]atomic.Uint64 // by State
	failOpenLong atomic.Uint64
	fetches      atomic.Uint64
	emptyFetches atomic.Uint64
	adds         atomic.Uint64
	removes      atomic.Uint64
	removeMisses atomic.Uint64
	builds       atomic.Uint64
	swaps        atomic.Uint64
	lastSwap     atomic.Int64  // Unix nanoseconds of the last swap; 0: none
	feedPosition atomic.Uint64 // changefeed.Position applied (Follow)
	feedLag      atomic.Int64  // time.Duration behind the feed (Follow)
	snapshots    atomic.Uint64
	feedErrors   [numCauses]atomic.Uint64 // runs of Follow ended by an error, by failCause

	auditSamples, auditFalseNegatives atomic.Uint64

	once         sync.Once // creates the histogram and counter below
	buildSeconds *prometheus.HistogramVec
	buildsTotal  *prometheus.CounterVec
}

func (m *metrics) failOpenTotal() uint64 {
	n := m.failOpenLong.Load()
	for i := range m.failOpen {
		n += m.failOpen[i].Load()
	}
	return n
}

func (m *metrics) vecs() (*prometheus.HistogramVec, *prometheus.CounterVec) {
	m.once.Do(func() {
		m.buildSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "bloomgate_build_duration_seconds",
			Help:    "Time to build a filter from the source (warm-up or rebuild).",
			Buckets: prometheus.ExponentialBuckets(0.01, 3, 10),
		}, []string{"kind"})
		m.buildsTotal = prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bloomgate_builds_total",
			Help: "Filter builds by kind (warm, rebuild, bootstrap, snapshot) and result (ok, error).",
		}, []string{"kind", "result"})
	})
	return m.buildSeconds, m.buildsTotal
}

func (m *metrics) observeBuild(kind string, d time.Duration, err error) {
	result := "ok"
	if err != nil {
		result = "error"
	}
	seconds, total := m.vecs()
	seconds.WithLabelValues(kind).Observe(d.Seconds())
	total.WithLabelValues(kind, result).Inc()
}

var (
	descLookups      = desc("lookups_total", "Lookups answered from the filter.")
	descAbsent       = desc("absent_total", "Lookups the filter answered 'definitely absent' (database queries avoided).")
	descFailOpen     = desc("fail_open_total", "Lookups sent to the database because the gate could not be sure, by reason.", "reason")
	descFetches      = desc("fetches_total", "Database fetches made by Lookup, after coalescing.")
	descEmpty        = desc("empty_fetches_total", "Fetches after a 'maybe' that found no row (observed false positives), after coalescing.")
	descAdds         = desc("adds_total", "Keys added.")
	descRemoves      = desc("removes_total", "Keys removed.")
	descRemoveMisses = desc("remove_misses_total", "Removes the filter rejected because the key was not in it (deletes out of step with adds).")
	descObservedFP   = desc("observed_fp_ratio", "Empty fetches / (absent answers + empty fetches).")
	descEstimatedFP  = desc("estimated_fp_ratio", "False-positive rate estimated from the filter's fill.")
	descConfiguredFP = desc("configured_fp_ratio", "Target false-positive rate.")
	descItems        = desc("filter_items", "Keys added to the serving filter, duplicates included.")
	descDistinct     = desc("filter_distinct_estimate", "Distinct keys in the serving filter, estimated from its fill.")
	descFill         = desc("filter_fill_ratio", "Fraction of the serving filter's bits or slots in use.")
	descBytes        = desc("filter_bytes", "Memory held by the serving filter.")
	descCapacity     = desc("filter_capacity", "Keys the serving filter was sized for.")
	descState        = desc("state", "1 for the gate's current state.", "state")
	descUnapplied    = desc("unapplied_removes", "Removes the serving filter did not apply (unsupported, deferred, or made during its build).")
	descJournal      = desc("journal_adds", "Recent adds a build would replay (8 bytes each).")
	descFeedPosition = desc("feed_position", "Change-feed position applied (PostgreSQL: LSN), while following a feed.")
	descFeedLag      = desc("feed_lag_seconds", "How far the applied position is behind the feed's head, while following a feed.")
	descSnapshots    = desc("snapshots_total", "Snapshots written while following a feed.")
	descFeedErrors   = desc("feed_errors_total", "Change-feed failures that made Follow fail open and restart, by cause (setup, timeout, rebuild, other).", "cause")
	descAuditSamples = desc("audit_samples_total", "'Absent' answers the self-audit checked against the table.")
	descAuditFN      = desc("audit_false_negatives_total", "Audited 'absent' answers whose row the table held: false negatives.")
	descGeneration   = desc("filter_generation", "Generation of the serving filter: the count of builds that produced it, or, on a fan-out instance, the feeder's generation.")
	descSwaps        = desc("swaps_total", "Filters that replaced a serving one without failing open (rebuilds, newer generations).")
	descLastSwap     = desc("last_swap_timestamp_seconds", "Unix time of the last swap; 0 before the first.")
)

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc("bloomgate_"+name, help, labels, nil)
}

// collector exposes a gate's counters, with its filter's stats, to
// Prometheus. The filter is read once per scrape.
type collector struct {
	m     *metrics
	stats func() Stats
}

func (g *Gate) collector() collector { return collector{m: g.m, stats: g.Stats} }

// Describe implements prometheus.Collector.
func (c collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descLookups, descAbsent, descFailOpen, descFetches, descEmpty, descAdds,
		descRemoves, descRemoveMisses, descObservedFP, descEstimatedFP, descConfiguredFP, descItems, descDistinct,
		descFill, descBytes, descCapacity, descState, descUnapplied, descJournal, descFeedPosition, descFeedLag,
		descSnapshots, descFeedErrors, descAuditSamples, descAuditFN, descGeneration, descSwaps, descLastSwap} {
		ch <- d
	}
	seconds, total := c.m.vecs()
	seconds.Describe(ch)
	total.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c collector) Collect(ch chan<- prometheus.Metric) {
	m, s := c.m, c.stats()
	counter := func(d *prometheus.Desc, v uint64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), l...)
	}
	gauge := func(d *prometheus.Desc, v float64, l ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, l...)
	}
	counter(descLookups, s.Lookups)
	counter(descAbsent, s.Absent)
	for st := range m.failOpen {
		if State(st) != StateReady && State(st) != StateRebuilding {
			counter(descFailOpen, m.failOpen[st].Load(), State(st).String())
		}
	}
	counter(descFailOpen, m.failOpenLong.Load(), "key_too_long")
	counter(descFetches, s.Fetches)
	counter(descEmpty, s.EmptyFetches)
	counter(descAdds, m.adds.Load())
	counter(descRemoves, m.removes.Load())
	counter(descRemoveMisses, m.removeMisses.Load())
	gauge(descObservedFP, s.ObservedFPRate)
	gauge(descEstimatedFP, s.Filter.EstimatedFPRate)
	gauge(descConfiguredFP, s.ConfiguredFPRate)
	gauge(descItems, float64(s.Filter.Items))
	gauge(descDistinct, s.Filter.EstimatedDistinct)
	gauge(descFill, s.Filter.FillRatio)
	gauge(descBytes, float64(s.Filter.Bytes))
	gauge(descCapacity, float64(s.Filter.Capacity))
	gauge(descUnapplied, float64(s.UnappliedRemoves))
	gauge(descJournal, float64(s.JournalAdds))
	gauge(descFeedPosition, float64(s.FeedPosition))
	gauge(descFeedLag, s.FeedLag.Seconds())
	counter(descSnapshots, s.Snapshots)
	for c := range m.feedErrors {
		counter(descFeedErrors, m.feedErrors[c].Load(), failCause(c).String())
	}
	counter(descAuditSamples, s.AuditSamples)
	counter(descAuditFN, s.AuditFalseNegatives)
	gauge(descGeneration, float64(s.Generation))
	counter(descSwaps, s.Swaps)
	last := 0.0
	if !s.LastSwap.IsZero() {
		last = float64(s.LastSwap.UnixNano()) / 1e9
	}
	gauge(descLastSwap, last)
	for st := StateWarming; st <= StateDegraded; st++ {
		v := 0.0
		if st == s.State {
			v = 1
		}
		gauge(descState, v, st.String())
	}
	seconds, total := m.vecs()
	seconds.Collect(ch)
	total.Collect(ch)
}
