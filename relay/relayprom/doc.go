// Package relayprom exports a relay's and a publisher's activity as
// Prometheus metrics: it implements txbox.RelayHook and outbox.Hook, and a
// collector of the outbox backlog fed by a cached store stats query, so
// packages relay and outbox themselves do not depend on the Prometheus
// client. Inbox metrics are in inbox/inboxprom.
//
//	m := relayprom.New(relayprom.Options{Stats: st}) // st: a dialect driver
//	prometheus.MustRegister(m)
//	pub, _ := outbox.NewPublisher(st, outbox.Config{Hook: m})
//	r, _ := relay.New(relay.Config{Store: st, Hooks: []txbox.RelayHook{m}, ...})
//	http.Handle("/metrics", promhttp.Handler())
//
// Labels are event types, sender and destination names and fixed result
// values, never event ids or keys. Types and destinations come from the
// database and the routes, so each label is bounded (Options.MaxTypes,
// Options.MaxDestinations): values beyond the bound are reported as
// "_other". The metric names, their labels and example alerts are listed
// in docs/metrics.md.
//
// The backlog gauges never run a query per scrape: a scrape uses the last
// store.Inspector.OutboxInspect result while it is younger than
// Options.StatsInterval, and concurrent scrapes share one query.
package relayprom
