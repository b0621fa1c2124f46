package inboxprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox/inbox"
)

// Metrics is a prometheus.Collector fed by an Inbox and a Cleaner, as
// their inbox.Hook. One Metrics may serve several inboxes. Labels are
// consumer names and fixed result values, never ids or keys, so the
// number of series stays bounded.
type Metrics struct {
	inbox.NopHook

	messages    *prometheus.CounterVec
	redelivered *prometheus.CounterVec
	cache       *prometheus.CounterVec
	cleaned     prometheus.Counter
	cleanupErrs prometheus.Counter
}

var (
	_ inbox.Hook           = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// New returns unregistered metrics; register them with a
// prometheus.Registerer.
func New() *Metrics {
	return &Metrics{
		messages: byConsumerResult("txbox_inbox_messages_total",
			"Messages handled by the inbox, by consumer and result (processed, duplicate, failed, lost)."),
		redelivered: byConsumerResult("txbox_inbox_redelivered_total",
			"Messages the broker delivered again (redelivery flag set or delivery count above 1), by consumer and result: work the broker and the database did twice."),
		cache: byConsumerResult("txbox_inbox_cache_lookups_total",
			"Inbox cache lookups, by consumer and result (hit, miss, error)."),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "txbox_inbox_cleanup_deleted_total",
			Help: "Inbox ids deleted by cleanup after the inbox TTL.",
		}),
		cleanupErrs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "txbox_inbox_cleanup_errors_total",
			Help: "Inbox cleanup runs that failed.",
		}),
	}
}

// byConsumerResult is a counter labelled the way every per-message
// counter of the inbox is: by consumer name and a fixed result value.
func byConsumerResult(name, help string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"consumer", "result"})
}

// OnHandled implements inbox.Hook.
func (m *Metrics) OnHandled(e inbox.HandledEvent) {
	m.messages.WithLabelValues(e.Consumer, e.Result.String()).Inc()
	if e.Delivery.IsRedelivery() {
		m.redelivered.WithLabelValues(e.Consumer, e.Result.String()).Inc()
	}
}

// OnCache implements inbox.Hook.
func (m *Metrics) OnCache(e inbox.CacheEvent) {
	res := "miss"
	switch {
	case e.Err != nil:
		res = "error"
	case e.Hit:
		res = "hit"
	}
	m.cache.WithLabelValues(e.Consumer, res).Inc()
}

// OnCleanup implements inbox.Hook.
func (m *Metrics) OnCleanup(e inbox.CleanupEvent) {
	m.cleaned.Add(float64(e.Deleted))
	if e.Err != nil {
		m.cleanupErrs.Inc()
	}
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.messages.Describe(ch)
	m.redelivered.Describe(ch)
	m.cache.Describe(ch)
	m.cleaned.Describe(ch)
	m.cleanupErrs.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.messages.Collect(ch)
	m.redelivered.Collect(ch)
	m.cache.Collect(ch)
	m.cleaned.Collect(ch)
	m.cleanupErrs.Collect(ch)
}
