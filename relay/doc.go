// Package relay delivers outbox rows to their destinations.
//
// A [Relay] runs one poller per event type: the types listed in
// [Config.Events] from the start, and every other type that has pending rows
// as soon as discovery sees it (so an event type nobody configured is still
// delivered with the default settings and the default route template).
//
// Each poller claims a batch of due rows (one statement, SKIP LOCKED, a
// lease), hands the batch to its [sender.Sender] outside any database
// transaction, and records the outcome of every row with one fenced finish
// per batch. Several batches of one type may be in flight at once
// ([EventSettings.InFlight]): the poller claims batch N+1 while batch N's
// acknowledgements are still outstanding, which is where the throughput
// comes from.
//
// Failures are classified with [txbox.Classify]:
//
//   - transient (the destination is down): the rows are released without
//     counting an attempt and the sender's circuit breaker opens. Every
//     poller routed to that sender stops claiming; after a cool-down one
//     probe batch is let through; success closes the circuit, failure
//     doubles the cool-down up to a cap. An outage therefore never burns
//     attempts or floods the dead-letter table.
//   - rejected (the message's fault): an attempt is counted and the row is
//     retried after the configured backoff, or failed when attempts are
//     exhausted.
//   - permanent: the row fails at once.
//
// Failed rows are moved to the dead-letter table by a background mover;
// rows whose lease expired (a crashed or paused relay) are put back by a
// recovery sweep without counting an attempt; processed rows and resolved
// dead letters are deleted after their TTLs by a cleanup job that runs on
// one instance at a time under a database lease.
//
// Polling is adaptive by default: a full batch polls again at once (after
// MinDelay), a partial or empty batch stretches the delay by Multiplier up
// to MaxDelay, so an idle type costs about 70 queries an hour. Wake-ups
// shortcut the wait: when the store implements [store.Waker] (PostgreSQL
// LISTEN/NOTIFY) and when an in-process publisher calls [Relay.Wake].
//
// The relay imports no broker client, database driver or metrics library;
// metrics plug in through [Hook].
package relay
