// Package inboxprom exports an inbox's activity as Prometheus metrics: it
// implements inbox.Hook (for an Inbox and a Cleaner), so package inbox
// itself does not depend on the Prometheus client.
//
//	m := inboxprom.New()
//	prometheus.MustRegister(m)
//	in, _ := inbox.New(st, inbox.Config{Consumer: "shipping", Hook: m})
//	cleaner, _ := inbox.NewCleaner(st, st, inbox.CleanerConfig{Hook: m})
//
// Metrics (the consumer label is the validated consumer name):
//
//	txbox_inbox_messages_total{consumer, result="processed|duplicate|failed|lost"}
//	txbox_inbox_redelivered_total{consumer, result}   broker redeliveries (flag or count > 1)
//	txbox_inbox_cache_lookups_total{consumer, result="hit|miss|error"}
//	txbox_inbox_cleanup_deleted_total
//	txbox_inbox_cleanup_errors_total
//
// result="lost" counts effects lost in non-transactional mode (the
// handler failed after the id was committed); alert on it. See
// docs/inbox.md.
package inboxprom
