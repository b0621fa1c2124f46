// Package relay delivers outbox rows to their destinations.
//
// A [Relay] runs one poller per event type: the types listed in
// [Config.Events] from the start, and every other type that has pending rows
// as soon as discovery sees it (so an event type nobody configured is still
// delivered with the default settings and the default route template), or
// at once when a wake-up names it ([Relay.Wake]).
//
// Each poller claims a batch of due rows (one statement, SKIP LOCKED, a
// lease) and hands it to its type's lane, which sends it with the type's
// [sender.Sender] outside any database transaction, judges the outcome
// with the destination's circuit, and records the outcome of every row
// with a fenced finish. In WAL mode the stream feeds the same lanes
// (docs/concepts.md, "WAL mode"), and the pollers take what it sends back
// to the table.
// Several batches of one type may be in flight at once
// ([EventSettings.InFlight]): the poller claims batch N+1 while batch N's
// acknowledgements are still outstanding. While a type has a backlog (its
// claims come back full) up to InFlight/2 helper claimers claim
// concurrently, sharing the same in-flight slots, because one claimer is
// bound by the latency of its claim statement; they stop at the first
// batch that is not full. Finishes of batches that complete together are
// folded into one statement (group commit). A batch whose lease ran out
// before it could be sent (the process was paused, say) is released
// unsent instead of producing duplicates.
//
// That is the lease claim, the default. A type with
// [EventSettings.Claim] set to [txbox.ClaimLock], on a store that implements
// [store.OutboxLocker] (PostgreSQL, MySQL/MariaDB), claims by locking the
// rows in a transaction held open while the batch is sent, and writes each
// row once, when that transaction's finish commits: a batch that is all
// released is rolled back, and a crashed relay's rows are claimable again
// at once (docs/concepts.md, "Claim modes").
//
// Failures are classified with [txbox.Classify]:
//
//   - transient (the destination is down): the rows are released without
//     counting an attempt and the destination's circuit breaker opens.
//     Circuits are per destination (sender name plus
//     [sender.DestinationOf] of the route), so one failing route pauses
//     only the types routed to it; a failure marked
//     [sender.Disconnected] opens the sender's connection circuit, which
//     pauses every destination of the sender. While a circuit is open its
//     pollers stop claiming; after a cool-down one probe batch is let
//     through; success closes the circuit, failure doubles the cool-down
//     up to a cap. An outage therefore never burns attempts or floods the
//     dead-letter table. A message that keeps failing transiently while
//     its destination accepts other batches is a poison message: its
//     failures count attempts and it ends in the dead-letter table
//     (docs/concepts.md, "Outages versus poison").
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
// Polling is adaptive by default: after a full batch the poller claims
// again at once (waiting MinDelay after every full batch would cap a drain
// at batch-size/MinDelay events per second) and the delay resets to
// MinDelay; each partial or empty batch waits the current delay and then
// stretches it by Multiplier up to MaxDelay, so an idle type costs about
// 70 queries an hour ([IdlePollsPerHour]). Fixed polling waits Delay after
// every batch that is not full. Wake-ups shortcut the wait: when the store
// implements [store.Waker] (PostgreSQL LISTEN/NOTIFY) and when an
// in-process publisher calls [Relay.Wake]; since outbox.Config.OnPublish
// fires before the publisher's commit, an empty woken poll is followed by
// a few quick follow-up polls (2, 10, 50ms).
//
// The relay imports no broker client, database driver or metrics library;
// metrics plug in through [txbox.RelayHook] (relay/relayprom exports them to
// Prometheus), probes read [Relay.Health] (package health), and
// Config.TracerProvider traces deliveries with the OpenTelemetry API only
// (docs/concepts.md, "Tracing").
package relay
