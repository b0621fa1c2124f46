// Package tenants runs one delivery unit per tenant in one process: the
// supervisor behind a relay that serves many tenants, each with its own
// outbox, dead-letter and inbox tables in a database or a schema of its
// own (docs/multi-tenant.md).
//
// A Supervisor asks Config.List which tenants there are, opens a Unit for
// each (in txbox relay, a relay.Relay over the tenant's store, sharing
// the process's senders) and starts it. It lists again every
// Config.Interval and on Reload: a tenant that appeared is started, one
// that went is stopped gracefully (its batches in flight finish), one
// whose settings changed (Spec.Key) is stopped and started again.
//
// Tenants are isolated: a tenant whose database is down or refuses its
// connections fails to open or start without touching the others, is
// reported Failing with its error (Status), and is retried with a
// growing back-off until it starts. A List that fails keeps the tenants
// as they are.
package tenants
