package relayprom

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
)

// Defaults of Options.
const (
	DefaultMaxTypes        = 200
	DefaultMaxDestinations = 100
	DefaultStatsInterval   = 5 * time.Second
	DefaultStatsTimeout    = 5 * time.Second
)

// Options configure Metrics. The zero value is ready to use (without the
// backlog gauges).
type Options struct {
	// Stats, when set, feeds the backlog gauges; a dialect driver
	// implements it (for a *config.Store, its Driver field). Nil leaves
	// them out.
	Stats StatsSource
	// StatsInterval is the most often Stats is queried: a scrape within
	// it reuses the last result. Defaults to DefaultStatsInterval.
	StatsInterval time.Duration
	// StatsTimeout bounds one stats query, so a slow database cannot hang
	// a scrape. Defaults to DefaultStatsTimeout.
	StatsTimeout time.Duration
	// MaxTypes bounds the event_type label values; later types are
	// reported as "_other". It bounds the (event_type, route) pairs of
	// fanned-out types (the route label) as well: later routes are
	// reported as route "_other". Defaults to DefaultMaxTypes.
	MaxTypes int
	// MaxDestinations bounds the destination label values, as MaxTypes.
	// Defaults to DefaultMaxDestinations.
	MaxDestinations int
}

func (o Options) withDefaults() Options {
	if o.StatsInterval <= 0 {
		o.StatsInterval = DefaultStatsInterval
	}
	if o.StatsTimeout <= 0 {
		o.StatsTimeout = DefaultStatsTimeout
	}
	if o.MaxTypes <= 0 {
		o.MaxTypes = DefaultMaxTypes
	}
	if o.MaxDestinations <= 0 {
		o.MaxDestinations = DefaultMaxDestinations
	}
	return o
}

// Metrics is a prometheus.Collector fed by relays (as their txbox.RelayHook),
// publishers (as their outbox.Hook) and, for the backlog, the store. One
// Metrics may serve several relays and publishers of one process.
type Metrics struct {
	txbox.NopRelayHook

	types, dests *boundedSet
	// routes admits (event type, route) pairs: route names come from
	// the configuration, but each type may have its own.
	routes *boundedSet
	stats  *statsCollector
	stream *streamCollector

	published     *prometheus.CounterVec
	publishErrors prometheus.Counter
	messages      *prometheus.CounterVec
	failed        *prometheus.CounterVec
	finishErrors  *prometheus.CounterVec
	send          *prometheus.HistogramVec
	claim         *prometheus.HistogramVec
	finish        *prometheus.HistogramVec
	polls         *prometheus.CounterVec
	delay         *prometheus.GaugeVec
	circuit       *prometheus.GaugeVec
	circuitOpened *prometheus.CounterVec
	jobRows       *prometheus.CounterVec
	jobErrors     *prometheus.CounterVec
}

var (
	_ txbox.RelayHook      = (*Metrics)(nil)
	_ outbox.Hook          = (*Metrics)(nil)
	_ prometheus.Collector = (*Metrics)(nil)
)

// latencyBuckets span a fast local claim (sub-millisecond) to a send that
// waits out a slow broker's timeout.
var latencyBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}

// New returns unregistered metrics; register them with a
// prometheus.Registerer.
func New(opts Options) *Metrics {
	opts = opts.withDefaults()
	m := &Metrics{types: newBoundedSet(opts.MaxTypes), dests: newBoundedSet(opts.MaxDestinations), routes: newBoundedSet(opts.MaxTypes),
		stream: newStreamCollector()}
	if opts.Stats != nil {
		m.stats = newStatsCollector(opts, m.types)
	}
	counter := func(name, help string, labels ...string) *prometheus.CounterVec {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	}
	histogram := func(name, help string, labels ...string) *prometheus.HistogramVec {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: latencyBuckets}, labels)
	}
	gauge := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	}
	m.published = counter("txbox_outbox_published_total",
		"Events inserted by in-process publishers, by event type (inside the caller's transaction, which may still roll back).", "event_type")
	m.publishErrors = prometheus.NewCounter(prometheus.CounterOpts{Name: "txbox_outbox_publish_errors_total",
		Help: "Publish calls whose insert failed."})
	m.messages = counter("txbox_relay_messages_total",
		"Messages the relay finished, by event type, fan-out route and result (sent, retried, dead_lettered, released, fenced).", "event_type", "route", "result")
	m.failed = counter("txbox_relay_failed_total",
		"Messages whose send failed, by event type and fan-out route: the sum of the retried, dead_lettered and released results.", "event_type", "route")
	m.finishErrors = counter("txbox_relay_finish_errors_total",
		"Batches whose finish failed (their rows are recovered after the lease), by event type and fan-out route.", "event_type", "route")
	m.send = histogram("txbox_relay_send_duration_seconds",
		"How long sending one batch took, by sender and destination.", "sender", "destination")
	m.claim = histogram("txbox_relay_claim_duration_seconds", "How long one claim statement took, by event type and fan-out route.", "event_type", "route")
	m.finish = histogram("txbox_relay_finish_duration_seconds",
		"How long recording one batch's outcome took, by event type and fan-out route.", "event_type", "route")
	m.polls = counter("txbox_relay_polls_total",
		"Claims, by event type, fan-out route and result (full, partial, empty, error).", "event_type", "route", "result")
	m.delay = gauge("txbox_relay_poll_delay_seconds", "The current polling delay, by event type and fan-out route.", "event_type", "route")
	m.circuit = gauge("txbox_relay_circuit_state",
		"Circuit state: 0 closed, 1 open, 2 half-open; by sender, destination and circuit (destination or connection).",
		"sender", "destination", "circuit")
	m.circuitOpened = counter("txbox_relay_circuit_opened_total",
		"Times a circuit opened, by sender, destination and circuit.", "sender", "destination", "circuit")
	m.jobRows = counter("txbox_relay_job_rows_total",
		"Rows changed by background jobs (recover, dead_letter_move, dead_letter_fingerprint, outbox_cleanup, dead_letter_cleanup, audit_cleanup; types found by discover and by the discover_wake looks that wake-ups ask for), by job.", "job")
	m.jobErrors = counter("txbox_relay_job_errors_total", "Background job rounds that failed, by job.", "job")
	return m
}

// OnPublish implements outbox.Hook.
func (m *Metrics) OnPublish(e outbox.PublishEvent) {
	if e.Err != nil {
		m.publishErrors.Inc()
		return
	}
	for t, n := range e.Counts {
		m.published.WithLabelValues(m.types.label(t)).Add(float64(n))
	}
}

// OnPoll implements txbox.RelayHook.
func (m *Metrics) OnPoll(e txbox.PollEvent) {
	t := m.types.label(e.EventType)
	rt := m.route(t, e.Route)
	m.claim.WithLabelValues(t, rt).Observe(e.Duration.Seconds())
	res := "partial"
	switch {
	case e.Err != nil:
		res = "error"
	case e.Claimed == 0:
		res = "empty"
	case e.Full:
		res = "full"
	}
	m.polls.WithLabelValues(t, rt, res).Inc()
	// Helper claims of a busy type report no delay: they claim again at
	// once, and the type's main loop keeps reporting its own.
	if e.NextDelay > 0 || res == "full" {
		m.delay.WithLabelValues(t, rt).Set(e.NextDelay.Seconds())
	}
}

// OnBatch implements txbox.RelayHook.
func (m *Metrics) OnBatch(e txbox.BatchEvent) {
	t := m.types.label(e.EventType)
	rt := m.route(t, e.Route)
	for _, r := range [...]struct {
		result string
		n      int
	}{{"sent", e.Sent}, {"retried", e.Retried}, {"dead_lettered", e.Failed}, {"released", e.Released}, {"fenced", e.Fenced}} {
		if r.n > 0 {
			m.messages.WithLabelValues(t, rt, r.result).Add(float64(r.n))
		}
	}
	if n := e.Retried + e.Failed + e.Released; n > 0 {
		m.failed.WithLabelValues(t, rt).Add(float64(n))
	}
	if e.SendDuration > 0 {
		m.send.WithLabelValues(e.Sender, m.dests.label(destination(e.Destination))).Observe(e.SendDuration.Seconds())
	}
	m.finish.WithLabelValues(t, rt).Observe(e.FinishDuration.Seconds())
	if e.FinishErr != nil {
		m.finishErrors.WithLabelValues(t, rt).Inc()
	}
}

// route is the route label of route of the type labelled t: "" for a
// type with one route; for a fanned-out type its name, while the
// (type, route) pairs seen stay within MaxTypes, else "_other", as is
// every route of a type reported as "_other" (its routes would multiply
// the series the type bound saved).
func (m *Metrics) route(t, route string) string {
	switch {
	case route == "":
		return ""
	case t == other:
		return other
	}
	if m.routes.label(t+"\x00"+route) == other {
		return other
	}
	return route
}

// OnCircuit implements txbox.RelayHook.
func (m *Metrics) OnCircuit(e txbox.CircuitEvent) {
	kind, dest := "destination", m.dests.label(destination(e.Destination))
	if e.Connection {
		kind, dest = "connection", ""
	}
	m.circuit.WithLabelValues(e.Sender, dest, kind).Set(float64(e.State))
	if e.State == txbox.CircuitOpen {
		m.circuitOpened.WithLabelValues(e.Sender, dest, kind).Inc()
	}
}

// OnMaintenance implements txbox.RelayHook.
func (m *Metrics) OnMaintenance(e txbox.MaintenanceEvent) {
	m.jobRows.WithLabelValues(e.Job).Add(float64(e.Count))
	if e.Err != nil {
		m.jobErrors.WithLabelValues(e.Job).Inc()
	}
}

func (m *Metrics) collectors() []prometheus.Collector {
	cs := []prometheus.Collector{m.published, m.publishErrors, m.messages, m.failed, m.finishErrors, m.send, m.claim,
		m.finish, m.polls, m.delay, m.circuit, m.circuitOpened, m.jobRows, m.jobErrors, m.stream}
	if m.stats != nil {
		cs = append(cs, m.stats)
	}
	return cs
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range m.collectors() {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	for _, c := range m.collectors() {
		c.Collect(ch)
	}
}
