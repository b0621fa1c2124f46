// Package inboxprom exports an inbox's activity as Prometheus metrics: it
// implements inbox.Hook and inbox.CleanerHook, so package inbox itself does
// not depend on the Prometheus client.
//
//	m := inboxprom.New()
//	prometheus.MustRegister(m)
//	in, _ := inbox.New(st, inbox.Config{Consumer: "shipping", Hook: m})
//	cleaner, _ := inbox.NewCleaner(st, st, inbox.CleanerConfig{Hook: m})
//
// Metrics (the consumer label is the validated consumer name):
//
//	txbox_inbox_messages_total{consumer, result="processed|duplicate|failed"}
//	txbox_inbox_cache_lookups_total{consumer, result="hit|miss"}
//	txbox_inbox_cleanup_deleted_total
package inboxprom
