package relay

import "time"

// Hook observes a Relay, typically to export metrics. The relay calls hooks
// synchronously from its own goroutines, possibly concurrently: they must be
// safe for concurrent use and return quickly. Embed NopHook to implement
// only some methods and stay compatible when methods are added.
type Hook interface {
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

// NopHook implements Hook with methods that do nothing.
type NopHook struct{}

// OnPoll does nothing.
func (NopHook) OnPoll(PollEvent) {}

// OnBatch does nothing.
func (NopHook) OnBatch(BatchEvent) {}

// OnCircuit does nothing.
func (NopHook) OnCircuit(CircuitEvent) {}

// OnMaintenance does nothing.
func (NopHook) OnMaintenance(MaintenanceEvent) {}

var _ Hook = NopHook{}

// PollEvent describes one claim.
type PollEvent struct {
	// EventType is the type claimed.
	EventType string
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
	// Sender names the sender (a key of Config.Senders).
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
	// JobDiscoverWake is the look for pending types that a wake-up naming
	// a type without a poller asks for (Relay.Wake): a discovery round
	// outside discovery's schedule.
	JobDiscoverWake = "discover_wake"
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
