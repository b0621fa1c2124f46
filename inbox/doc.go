// Package inbox is the consumer side of txbox: an idempotent consumer that
// records the id of every event it handled in the inbox table, so that a
// duplicate delivery has no second effect.
//
// Brokers deliver at least once. The relay retries when the outcome of a
// send is unknown, brokers redeliver after a consumer crash, and a webhook
// is retried after a timeout. The inbox turns those duplicates into no-ops:
//
//   - Transactional mode (the default) is effectively-once. One database
//     transaction records the id and runs the handler, which writes its
//     effect through the same transaction. A handler error or panic rolls
//     back both, so the next delivery runs it again; a commit makes both
//     durable, so the next delivery is reported as a Duplicate.
//   - Non-transactional mode is at-most-once. The id is recorded and
//     committed first, then the handler runs. Use it for effects that
//     cannot join a database transaction (an e-mail, a payment API call
//     without its own idempotency key): a crash between the commit and the
//     effect loses the effect rather than repeating it. A handler that
//     fails after the commit is reported as Lost (logged at ERROR, told to
//     the Hook) and acknowledged, since a redelivery would be a Duplicate.
//
// Recording is one insert-or-ignore statement keyed by (consumer, event id),
// never a read followed by a write, so two goroutines or two processes that
// receive the same event at the same moment produce exactly one effect: the
// second insert waits for the first transaction and then finds the id
// taken.
//
// An optional Cache (the in-memory LRU here, or Redis in package
// inbox/rediscache) is consulted before the table and written only after the
// table row is committed. The table stays the source of truth: losing the
// cache costs one table lookup, never a second effect.
//
// A Cleaner deletes ids older than the inbox TTL in bounded batches, on one
// instance at a time under a database lease. See docs/inbox.md for sizing
// the TTL.
//
// A Hook (inbox/inboxprom exports it to Prometheus) gets one event per
// settled message, carrying the broker's delivery metadata
// (Message.Delivery: count, redelivery flag, position), one per cache
// lookup and one per cleaner run.
//
// Tenants holds one Inbox per tenant (each on that tenant's database or
// schema) and routes a message to its tenant's inbox by the txbox-tenant
// header a relay serving tenants sets; a message of a tenant without an
// inbox is refused (ErrUnknownTenant), never handled in another tenant's
// tables. See docs/multi-tenant.md, "Consumers".
//
// Broker adapters that feed an Inbox, or Tenants, live in the consume/
// packages.
package inbox
