package relayprom

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/txbox/txbox/relay"
)

// HealthSource is what the stream gauges read: a *relay.Relay.
type HealthSource interface{ Health() relay.Health }

// streamCollector reports WAL mode's stream and its slot from the relay's
// Health (docs/operations.md, "WAL mode"); it reports nothing for a relay
// in table mode or before WatchRelay.
type streamCollector struct {
	mu  sync.Mutex
	src HealthSource

	state, restartLag, flushLag, safeWAL, spillBytes, confirmAge, held, spilled, pauses, losses, dropped, recreated *prometheus.Desc
}

func newStreamCollector() *streamCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc("txbox_stream_"+name, help, labels, nil)
	}
	return &streamCollector{
		state:      d("state", "1 for the stream's current state (starting, streaming, standby, failing).", "state"),
		restartLag: d("slot_restart_lag_bytes", "WAL bytes from the slot's restart_lsn to the server's current position: WAL the slot keeps on disk. A long or prepared transaction holds it back while delivery lag reads 0."),
		flushLag:   d("slot_flush_lag_bytes", "WAL bytes from the slot's confirmed_flush_lsn to the server's current position: WAL not yet confirmed as delivered."),
		safeWAL:    d("slot_safe_wal_size_bytes", "WAL bytes that can still be written before the slot is at risk of invalidation (max_slot_wal_keep_size); -1 when unbounded."),
		spillBytes: d("slot_spill_bytes", "Bytes of decoded transactions the server spilled to pg_replslot/ for this slot (larger than logical_decoding_work_mem); not bounded by max_slot_wal_keep_size."),
		confirmAge: d("last_confirm_age_seconds", "Seconds since this relay last confirmed a position; absent before its first confirm."),
		held:       d("held_events", "Events the stream holds between reading and confirming."),
		spilled:    d("spilled_events_total", "Events the stream spilled into the outbox table (destination failing or slow, key behind rows in the table, future not-before)."),
		pauses:     d("pauses_total", "Times this relay found it had been stopped (SIGSTOP, a frozen VM) past its pause limit, and dropped what it held unsent for the relay that took the stream over."),
		losses:     d("losses_total", "Sessions this relay lost: paused past its pause limit, its replication connection broke or went silent, a confirm failed, or another process streams the slot; each time it dropped what it held unsent for the relay that holds the stream now."),
		recreated:  d("slot_recreated_total", "Lost slots (a failover to a standby without the slot, an invalidation) this relay recreated (database.wal.on-slot-lost: recreate); the events emitted after the last confirm were not delivered: the relay logs their LSN range at ERROR."),
		dropped:    d("dropped_events_total", "Events this relay let go of unsent and unspilled after losing its session, for the relay that holds the stream now to deliver."),
	}
}

func (c *streamCollector) descs() []*prometheus.Desc {
	return []*prometheus.Desc{c.state, c.restartLag, c.flushLag, c.safeWAL, c.spillBytes, c.confirmAge, c.held, c.spilled, c.pauses, c.losses, c.dropped, c.recreated}
}

// Describe implements prometheus.Collector.
func (c *streamCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs() {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *streamCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	src := c.src
	c.mu.Unlock()
	if src == nil {
		return
	}
	st := src.Health().Stream
	if st == nil {
		return
	}
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, s := range []relay.StreamState{relay.StreamStarting, relay.StreamStreaming, relay.StreamStandby, relay.StreamFailing} {
		v := 0.0
		if st.State == s {
			v = 1
		}
		g(c.state, v, string(s))
	}
	g(c.held, float64(st.Held))
	ch <- prometheus.MustNewConstMetric(c.spilled, prometheus.CounterValue, float64(st.Spilled))
	ch <- prometheus.MustNewConstMetric(c.pauses, prometheus.CounterValue, float64(st.Pauses))
	ch <- prometheus.MustNewConstMetric(c.losses, prometheus.CounterValue, float64(st.Losses))
	ch <- prometheus.MustNewConstMetric(c.dropped, prometheus.CounterValue, float64(st.Dropped))
	ch <- prometheus.MustNewConstMetric(c.recreated, prometheus.CounterValue, float64(st.SlotRecreations))
	if !st.LastConfirm.IsZero() {
		g(c.confirmAge, time.Since(st.LastConfirm).Seconds())
	}
	if sl := st.Slot; sl != nil {
		g(c.restartLag, float64(sl.RestartLag))
		g(c.flushLag, float64(sl.FlushLag))
		g(c.safeWAL, float64(sl.SafeWALSize))
		g(c.spillBytes, float64(sl.SpillBytes))
	}
}

// WatchRelay makes the stream gauges read r's Health. A relay is made
// after its hooks, so this comes after New.
func (m *Metrics) WatchRelay(r HealthSource) {
	m.stream.mu.Lock()
	m.stream.src = r
	m.stream.mu.Unlock()
}
