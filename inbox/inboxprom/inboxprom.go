package inboxprom

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox/inbox"
)

// Metrics is a prometheus.Collector fed by an Inbox (as its Hook) and a
// Cleaner (as its CleanerHook). One Metrics may serve several inboxes.
type Metrics struct {
	messages *prometheus.CounterVec
	cache    *prometheus.CounterVec
	cleaned  prometheus.Counter
}

var (
	_ inbox.Hook           = (*Metrics)(nil)
	_ inbox.CleanerHook    = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// New returns unregistered metrics; register them with a
// prometheus.Registerer.
func New() *Metrics {
	return &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "txbox_inbox_messages_total",
			Help: "Messages handled by the inbox, by consumer and result (processed, duplicate, failed).",
		}, []string{"consumer", "result"}),
		cache: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "txbox_inbox_cache_lookups_total",
			Help: "Inbox cache lookups, by consumer and result (hit, miss).",
		}, []string{"consumer", "result"}),
		cleaned: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "txbox_inbox_cleanup_deleted_total",
			Help: "Inbox ids deleted by cleanup after the inbox TTL.",
		}),
	}
}

// InboxHandled implements inbox.Hook.
func (m *Metrics) InboxHandled(consumer string, r inbox.Result, n int) {
	m.messages.WithLabelValues(consumer, r.String()).Add(float64(n))
}

// InboxCache implements inbox.Hook.
func (m *Metrics) InboxCache(consumer string, hit bool) {
	res := "miss"
	if hit {
		res = "hit"
	}
	m.cache.WithLabelValues(consumer, res).Inc()
}

// InboxCleaned implements inbox.CleanerHook.
func (m *Metrics) InboxCleaned(deleted int) { m.cleaned.Add(float64(deleted)) }

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.messages.Describe(ch)
	m.cache.Describe(ch)
	m.cleaned.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.messages.Collect(ch)
	m.cache.Collect(ch)
	m.cleaned.Collect(ch)
}
