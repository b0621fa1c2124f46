package relayprom

import (
	"context"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox/store"
)

// StatsSource answers the backlog query: store.Inspector, which the
// dialect drivers implement, has this method.
type StatsSource interface {
	OutboxInspect(ctx context.Context) ([]*store.OutboxTypeDetail, error)
}

// statsCollector exports the backlog from the last OutboxInspect result,
// querying again only when that result is older than the interval. The
// query scans the backlog (counts per type), which is what a scrape every
// few seconds from several Prometheus servers must not repeat each time.
type statsCollector struct {
	src      StatsSource
	interval time.Duration
	timeout  time.Duration
	types    *boundedSet

	backlog, lag    *prometheus.Desc
	queries, errors prometheus.Counter

	// mu is held during a query, so concurrent scrapes share it.
	mu      sync.Mutex
	fetched time.Time
	last    map[string]*store.OutboxTypeDetail
	// known are the types ever reported: one that has nothing left is
	// reported as zero instead of vanishing, so a lag alert resolves.
	known map[string]struct{}
}

func newStatsCollector(opts Options, types *boundedSet) *statsCollector {
	return &statsCollector{
		src: opts.Stats, interval: opts.StatsInterval, timeout: opts.StatsTimeout, types: types,
		backlog: prometheus.NewDesc("txbox_outbox_backlog",
			"Unfinished outbox rows by event type and state (due, scheduled, in_process, failed), from a stats query cached for the stats interval.",
			[]string{"event_type", "state"}, nil),
		lag: prometheus.NewDesc("txbox_outbox_oldest_due_age_seconds",
			"Lag: the age of the oldest due PENDING row of each event type (rows scheduled for later are not lag).",
			[]string{"event_type"}, nil),
		queries: prometheus.NewCounter(prometheus.CounterOpts{Name: "txbox_outbox_stats_queries_total",
			Help: "Stats queries run for the backlog gauges (at most one per stats interval)."}),
		errors: prometheus.NewCounter(prometheus.CounterOpts{Name: "txbox_outbox_stats_errors_total",
			Help: "Stats queries that failed; the gauges then keep their last values."}),
		known: make(map[string]struct{}),
	}
}

// Describe implements prometheus.Collector.
func (c *statsCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.backlog
	ch <- c.lag
	c.queries.Describe(ch)
	c.errors.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *statsCollector) Collect(ch chan<- prometheus.Metric) {
	snap := c.snapshot()
	for t, s := range snap {
		gauge := func(d *prometheus.Desc, v float64, extra ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, append([]string{t}, extra...)...)
		}
		gauge(c.backlog, float64(s.Due), "due")
		gauge(c.backlog, float64(s.Scheduled), "scheduled")
		gauge(c.backlog, float64(s.InProcess), "in_process")
		gauge(c.backlog, float64(s.Failed), "failed")
		gauge(c.lag, s.OldestDueAge.Seconds())
	}
	c.queries.Collect(ch)
	c.errors.Collect(ch)
}

// snapshot returns the stats per label value, querying when the cached
// result is older than the interval.
func (c *statsCollector) snapshot() map[string]*store.OutboxTypeDetail {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.last == nil || time.Since(c.fetched) >= c.interval {
		c.refresh()
	}
	out := make(map[string]*store.OutboxTypeDetail, len(c.known))
	for t := range c.known {
		out[t] = &store.OutboxTypeDetail{EventType: t}
	}
	for t, s := range c.last {
		out[t] = s
	}
	return out
}

// refresh runs the query; c.mu is held. A failed query keeps the last
// result and is retried after the interval, not on the next scrape.
func (c *statsCollector) refresh() {
	c.fetched = time.Now()
	c.queries.Inc()
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	all, err := c.src.OutboxInspect(ctx)
	if err != nil {
		c.errors.Inc()
		if c.last == nil {
			c.last = map[string]*store.OutboxTypeDetail{}
		}
		return
	}
	last := make(map[string]*store.OutboxTypeDetail, len(all))
	for _, s := range all {
		t := c.types.label(s.EventType)
		c.known[t] = struct{}{}
		agg := last[t]
		if agg == nil {
			agg = &store.OutboxTypeDetail{EventType: t}
			last[t] = agg
		}
		// Several types fold into "_other": sum the counts, keep the
		// worst ages.
		agg.Due += s.Due
		agg.Scheduled += s.Scheduled
		agg.InProcess += s.InProcess
		agg.Failed += s.Failed
		agg.OldestDueAge = max(agg.OldestDueAge, s.OldestDueAge)
	}
	c.last = last
}
