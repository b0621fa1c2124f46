package txbox

import "time"

// The relay's vocabulary: the values of its per-type settings (ordering,
// commit horizon, claim mode) and the events it reports to hooks. They
// live here, in the leaf package, so that a program that configures or
// observes a relay (a metrics exporter, a dashboard, a test) names them
// without importing package relay and what it pulls in, as River's
// rivertype does for its job types (docs/architecture.md, "Where the
// public types live"). Package relay keeps deprecated aliases for one
// release (docs/upgrading.md).

// Ordering says whether events of one type are delivered in order per key.
type Ordering string

// Orderings.
const (
	// OrderingNone delivers rows in parallel, roughly in due-time order.
	OrderingNone Ordering = "none"
	// OrderingKey delivers events with the same key in their producers'
	// order: transaction order on PostgreSQL, insert order on SQLite, id
	// order on MySQL/MariaDB (docs/concepts.md, "Ordering").
	OrderingKey Ordering = "key"
)

// CommitHorizon says whether an ordered type's claim waits for the
// commit horizon (docs/concepts.md, "Ordering"): on PostgreSQL, a key's
// head is claimed only once every transaction that could still commit an
// earlier row of its key has ended, that is once the row is below the
// horizon, where every transaction has settled.
type CommitHorizon string

// Commit horizons.
const (
	// CommitHorizonOn claims a key's head only below the commit horizon.
	CommitHorizonOn CommitHorizon = "on"
	// CommitHorizonOff claims a key's head as soon as no earlier row of
	// its key is visible: only for producers that never overlap on a key
	// (one producer per key, each waiting for its commit before the next
	// publish), which then save the horizon's wait behind unrelated long
	// transactions.
	CommitHorizonOff CommitHorizon = "off"
)

// ClaimMode says how a relay claims the rows of one event type
// (docs/concepts.md, "Claim modes").
type ClaimMode string

// Claim modes.
const (
	// ClaimLease marks claimed rows IN_PROCESS with a lease and finishes
	// them in a second write; a crashed relay's rows wait out their
	// lease. Every store has it.
	ClaimLease ClaimMode = "lease"
	// ClaimLock locks the claimed rows in a transaction held open while
	// they are sent, and writes each row once, at the finish, in that
	// transaction (store.OutboxLocker in package store). A crashed relay's rows are
	// claimable at once. It holds one database connection per batch in
	// flight for as long as the send takes (at most the lease), so it
	// suits fast destinations (brokers), not slow webhooks. PostgreSQL and
	// MySQL/MariaDB have it; asking for it on SQLite is a configuration
	// error.
	ClaimLock ClaimMode = "lock"
	// ClaimStream is the claim mode a WAL-mode lane shows in the relay's
	// health (relay.Health.Types) and in BatchEvent.Claim: its events come
	// from the stream, not from a claim. It is never a configuration
	// value.
	ClaimStream ClaimMode = "stream"
)

// RelayHook observes a relay (package relay's Relay, which takes hooks in
// Config.Hooks), typically to export metrics. The relay calls hooks
// synchronously from its own goroutines, possibly concurrently: they must be
// safe for concurrent use and return quickly. Embed NopRelayHook to
// implement only some methods and stay compatible when methods are added.
type RelayHook interface {
	// OnPoll is called after every claim of one event type.
	OnPoll(PollEvent)
	// OnBatch is called after a claimed batch was sent and finished.
	OnBatch(BatchEvent)
	// OnCircuit is called when a circuit (one destination's, or a
	// sender's connection) changes state.
	OnCircuit(CircuitEvent)
	// OnMaintenance is called after each round of a background job
	// (recovery, dead-letter move, cleanup, discovery).
	OnMaintenance(MaintenanceEvent)
}

// NopRelayHook implements RelayHook with methods that do nothing.
type NopRelayHook struct{}

// OnPoll does nothing.
func (NopRelayHook) OnPoll(PollEvent) {}

// OnBatch does nothing.
func (NopRelayHook) OnBatch(BatchEvent) {}

// OnCircuit does nothing.
func (NopRelayHook) OnCircuit(CircuitEvent) {}

// OnMaintenance does nothing.
func (NopRelayHook) OnMaintenance(MaintenanceEvent) {}

var _ RelayHook = NopRelayHook{}

// PollEvent describes one claim.
type PollEvent struct {
	// EventType is the type claimed.
	EventType string
	// Route is the fan-out route claimed (docs/concepts.md, "Fan-out"),
	// empty for a type with one route.
	Route string
	// Claimed is the number of rows claimed.
	Claimed int
	// Limit is the batch size asked for; Claimed == Limit is a full batch.
	Limit int
	// Full reports Claimed == Limit.
	Full bool
	// NextDelay is the polling delay chosen after this claim.
	NextDelay time.Duration
	// Duration is how long the claim statement took.
	Duration time.Duration
	// Err is the claim's error, if any (then Claimed is 0).
	Err error
}

// BatchEvent describes one batch after its finish.
type BatchEvent struct {
	// EventType is the batch's event type.
	EventType string
	// Route is the fan-out route the batch went to (docs/concepts.md,
	// "Fan-out"), empty for a type with one route.
	Route string
	// Sender names the sender the batch went to.
	Sender string
	// Destination names the destination on that sender the type's route
	// resolves to (as in CircuitEvent); empty for a route naming none.
	Destination string
	// Claim is where the batch came from: the type's claim mode, or
	// ClaimStream for a batch of WAL mode's stream.
	Claim ClaimMode
	// Sent counts acknowledged messages.
	Sent int
	// Retried counts messages scheduled for another attempt: rejected, or
	// failing transiently while their destination accepts other batches
	// (docs/concepts.md, "Outages versus poison").
	Retried int
	// Failed counts messages that failed for good (attempts exhausted,
	// permanent error, or a row that could not be turned into a message
	// and was not sent); the dead-letter mover will take them.
	Failed int
	// Released counts messages put back without counting an attempt
	// (transient failure while the destination may be down, shutdown).
	Released int
	// Fenced counts rows whose finish changed nothing because another
	// relay owns them now (this relay's lease expired).
	Fenced int
	// SendDuration is how long sender.Send took for the batch.
	SendDuration time.Duration
	// FinishDuration is how long recording the outcome took, including
	// waiting for a group finish shared with other batches.
	FinishDuration time.Duration
	// FinishErr is the finish's error, if any: the rows stay claimed until
	// their lease expires and are then recovered.
	FinishErr error
}

// CircuitState is the state of a circuit breaker.
type CircuitState int

// Circuit states.
const (
	// CircuitClosed lets every batch through.
	CircuitClosed CircuitState = iota
	// CircuitOpen lets nothing through until the cool-down has passed.
	CircuitOpen
	// CircuitHalfOpen lets one probe batch through.
	CircuitHalfOpen
)

// String returns "closed", "open" or "half-open".
func (s CircuitState) String() string {
	switch s {
	case CircuitOpen:
		return "open"
	case CircuitHalfOpen:
		return "half-open"
	default:
		return "closed"
	}
}

// CircuitEvent describes a circuit state change. Each destination has a
// circuit, and each sender one more for its connection
// (docs/concepts.md, "Outages versus poison").
type CircuitEvent struct {
	// Sender names the sender (a key of relay.Config.Senders).
	Sender string
	// Destination names the destination on that sender, as returned by
	// sender.DestinationOf for the routes of the types routed to it. It is
	// empty for the connection circuit (and for a route that names no
	// destination).
	Destination string
	// Connection is true for the circuit of the sender's connection
	// itself: opened by failures the sender marks sender.Disconnected, it
	// pauses every destination of the sender.
	Connection bool
	// State is the new state.
	State CircuitState
	// CoolDown is the wait before the next probe when State is open.
	CoolDown time.Duration
	// Err is the failure that opened the circuit, if any.
	Err error
}

// Background job names used in MaintenanceEvent.Job.
const (
	JobRecover           = "recover"
	JobDeadLetterMove    = "dead_letter_move"
	JobOutboxCleanup     = "outbox_cleanup"
	JobDeadLetterCleanup = "dead_letter_cleanup"
	JobDiscover          = "discover"
	// JobDeadLetterFingerprint fingerprints the dead letters that have no
	// fingerprint yet, the key of their failure group (docs/operations.md,
	// "Failure groups"): those the mover or a lock claim's finish just
	// moved, and those stored before fingerprints were.
	JobDeadLetterFingerprint = "dead_letter_fingerprint"
	// JobDiscoverWake is the look for pending types that a wake-up naming
	// a type without a poller asks for (Relay.Wake): a discovery round
	// outside discovery's schedule.
	JobDiscoverWake = "discover_wake"
	// JobHeartbeat is the relay's heartbeat row (docs/operations.md,
	// "Relay instances"), also named in the relay's Health.JobErrors.
	JobHeartbeat = "heartbeat"
	// JobAuditCleanup deletes entries of the audit trail older than
	// cleanup.audit-ttl (store.AuditLog), in the same round and under
	// the same lease as the outbox and dead-letter cleanups.
	JobAuditCleanup = "audit_cleanup"
	// JobExpand turns the new events of a fanned-out type into one row
	// per route, or, for a type on the shared claim, gives the routes
	// that did not acknowledge a batch's events rows of their own
	// (docs/concepts.md, "Fan-out"); Count is the events expanded or
	// split.
	JobExpand = "expand"
	// JobDropRoutes dead-letters the pending deliveries of routes that
	// left the configuration; it runs with discovery.
	JobDropRoutes = "drop_routes"
)

// MaintenanceEvent describes one round of a background job.
type MaintenanceEvent struct {
	// Job is one of the Job* constants.
	Job string
	// Count is the number of rows the round changed (types found, for
	// discovery).
	Count int
	// Err is the round's error, if any.
	Err error
}
