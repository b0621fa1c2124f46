package consume

import (
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/backoff"
)

// Sentinel errors of the broker adapters' lifecycle (Start, Stop, Run).
var (
	// ErrAlreadyStarted is returned by Start, or Run, on a consumer
	// that was started before.
	ErrAlreadyStarted = errors.New("consume: already started")
	// ErrNotStarted is returned by Stop before Start.
	ErrNotStarted = errors.New("consume: not started")
	// ErrStopped is returned by Start, or Run, once the consumer has
	// stopped (by Stop, even before Start, or by itself): a consumer
	// runs once; make a new one to run again.
	ErrStopped = errors.New("consume: stopped")
)

// InvalidMessageError is returned for a message that cannot be handled at
// all, whatever the number of attempts: it carries no event id, or a
// malformed one, or (an adapter given Config.Tenants) it names a tenant
// that has no inbox. Adapters do not redeliver such messages (a
// redelivery would fail the same way); they log them and, where the
// broker has one, reject them to its dead-letter mechanism.
type InvalidMessageError struct {
	Reason string
	// Err is the cause, when there is one: an *inbox.UnknownTenantError
	// for a message of an unknown tenant.
	Err error
}

func (e *InvalidMessageError) Error() string { return "consume: invalid message: " + e.Reason }

// Unwrap returns Err, so errors.Is(err, inbox.ErrUnknownTenant) sees
// through it.
func (e *InvalidMessageError) Unwrap() error { return e.Err }

// ConfigError is txbox.ConfigError: the adapters' constructors return it,
// with Component "consume/<adapter>", for a missing or invalid setting.
// Field names it; it matches txbox.ErrInvalidConfig.
type ConfigError = txbox.ConfigError

// NewMessage builds the inbox.Message of a received message. id is the
// value of the txbox-event-id header (or the broker's message id field,
// which txbox's senders set to the same value, or a CloudEvent's id
// attribute: NewMessageFromHeaders picks it); eventType that of
// txbox-event-type, informational.
func NewMessage(id, eventType, key string, payload []byte, headers map[string]string) (inbox.Message, error) {
	if id == "" {
		return inbox.Message{}, &InvalidMessageError{Reason: "no " + txbox.HeaderEventID + " header"}
	}
	parsed, err := txbox.ParseID(id)
	if err != nil {
		return inbox.Message{}, &InvalidMessageError{Reason: fmt.Sprintf("malformed %s header: %v", txbox.HeaderEventID, err)}
	}
	if parsed == (txbox.ID{}) {
		return inbox.Message{}, &InvalidMessageError{Reason: "zero " + txbox.HeaderEventID}
	}
	return inbox.Message{ID: parsed, Type: eventType, Key: key, Payload: payload, Headers: headers}, nil
}

// DefaultDrainTimeout is how long an adapter lets the handlers already
// running finish once stopping began (Stop, or Run's context ended),
// before it cancels their context: well inside the 30 s a supervisor such as Kubernetes waits
// between SIGTERM and SIGKILL.
const DefaultDrainTimeout = 20 * time.Second

// DrainTimeout checks an adapter's Config.DrainTimeout and applies the
// default. The error names the adapter.
func DrainTimeout(adapter string, d time.Duration) (time.Duration, error) {
	if d < 0 {
		return 0, &ConfigError{Component: "consume/" + adapter, Field: "DrainTimeout", Reason: fmt.Sprintf("must not be negative, got %s", d)}
	}
	if d == 0 {
		d = DefaultDrainTimeout
	}
	return d, nil
}

// Backoff is the consumer adapters' retry delay: Min, doubled per
// failure, capped at Max. It is the relay's retry schedule
// (relay.BackoffSettings) with the multiplier fixed at 2 and no jitter,
// Min standing for the relay's Delay; both are computed by the same
// policy (internal/backoff), so the two read and behave as one backoff.
type Backoff struct {
	// Min is the first delay. Defaults to DefaultMinBackoff.
	Min time.Duration
	// Max caps the delay. Defaults to DefaultMaxBackoff.
	Max time.Duration
}

// Backoff defaults.
const (
	DefaultMinBackoff = 100 * time.Millisecond
	DefaultMaxBackoff = 30 * time.Second
)

// Normalize fills zero fields with defaults and checks the values. The
// error names the field.
func (b Backoff) Normalize() (Backoff, error) {
	if b.Min < 0 || b.Max < 0 {
		return b, &ConfigError{Component: "consume", Field: "Backoff", Reason: fmt.Sprintf("must not be negative (min %s, max %s)", b.Min, b.Max)}
	}
	if b.Min == 0 {
		b.Min = DefaultMinBackoff
	}
	if b.Max == 0 {
		b.Max = DefaultMaxBackoff
	}
	if b.Max < b.Min {
		return b, &ConfigError{Component: "consume", Field: "Backoff.Max", Reason: fmt.Sprintf("%s is below Min %s", b.Max, b.Min)}
	}
	return b, nil
}

// Delay returns the delay before retry number attempt (1-based):
// Min × 2^(attempt-1), capped at Max.
func (b Backoff) Delay(attempt int) time.Duration {
	return b.policy().Delay(attempt)
}

// policy is b as the shared backoff policy, as relay.BackoffSettings has
// one.
func (b Backoff) policy() backoff.Policy {
	return backoff.Policy{Initial: b.Min, Multiplier: 2, Max: b.Max}
}
