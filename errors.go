package txbox

import (
	"errors"
	"fmt"
)

// Sentinel errors. Compare with errors.Is.
var (
	// ErrNoTransaction is returned when a publish or a transactional inbox
	// call is given something that is not an open transaction (a *sql.DB, a
	// pool, nil). txbox never autocommits an event on its own.
	ErrNoTransaction = errors.New("txbox: a transaction is required")

	// ErrNotFound is returned when a dead letter or event looked up by id
	// does not exist.
	ErrNotFound = errors.New("txbox: not found")

	// ErrInvalidIdentifier is returned when a schema, table prefix or
	// consumer name does not match the strict identifier pattern.
	ErrInvalidIdentifier = errors.New("txbox: invalid identifier")

	// ErrClosed is returned by calls made after Close or Stop.
	ErrClosed = errors.New("txbox: closed")

	// ErrInvalidConfig is matched by every *ConfigError: a constructor
	// (relay.New, outbox.NewPublisher, inbox.New, the consume adapters)
	// was given a missing or out-of-range setting, and by every error
	// config.Load returns for a bad file.
	ErrInvalidConfig = errors.New("txbox: invalid configuration")
)

// ConfigError is a configuration problem at one setting. Every package of
// the module reports a bad setting with it, so one errors.Is(err,
// ErrInvalidConfig) or errors.As(err, &ce) works for all of them.
type ConfigError struct {
	// Component is the package reporting it: "relay", "outbox", "inbox",
	// "consume/kafka" and so on.
	Component string
	// Field names the setting: the Go path of the field in the
	// component's configuration, field names joined by dots and a map's
	// key quoted in brackets (`Events["orders"].Polling.MaxDelay` for
	// the relay, "PullExpiry" for a consumer).
	Field string
	// Reason says what is wrong, as a predicate of Field ("must be ≥ 1").
	Reason string
	// Err is the underlying cause, if any, such as ErrInvalidIdentifier
	// for a hostile consumer name.
	Err error
}

// Error returns "<component>: <field> <reason>".
func (e *ConfigError) Error() string {
	msg := e.Field + " " + e.Reason
	if e.Component != "" {
		msg = e.Component + ": " + msg
	}
	return msg
}

// Is makes every ConfigError match ErrInvalidConfig.
func (e *ConfigError) Is(target error) bool { return target == ErrInvalidConfig }

// Unwrap returns the underlying cause, if any.
func (e *ConfigError) Unwrap() error { return e.Err }

// InvalidEventTypeError is returned when an event type is empty, too long or
// contains a character outside [A-Za-z0-9._:-].
type InvalidEventTypeError struct {
	Type   string
	Reason string
}

func (e *InvalidEventTypeError) Error() string {
	t := e.Type
	if len(t) > 64 {
		t = t[:64] + "…"
	}
	return fmt.Sprintf("txbox: invalid event type %q: %s", t, e.Reason)
}

// PayloadTooLargeError is returned at publish time, inside the caller's
// transaction, when an event's payload exceeds the configured limit.
type PayloadTooLargeError struct {
	EventType string
	Size      int
	Limit     int
}

func (e *PayloadTooLargeError) Error() string {
	return fmt.Sprintf("txbox: payload of %d bytes for event type %q exceeds the limit of %d bytes", e.Size, e.EventType, e.Limit)
}

// UnsupportedTxError is returned when a publish is given a transaction type
// the store's dialect cannot execute on.
type UnsupportedTxError struct {
	Dialect string
	Type    string
}

func (e *UnsupportedTxError) Error() string {
	return fmt.Sprintf("txbox: %s store cannot publish through a transaction of type %s", e.Dialect, e.Type)
}

// Is makes an UnsupportedTxError match ErrNoTransaction: in both cases no
// usable transaction was given.
func (e *UnsupportedTxError) Is(target error) bool { return target == ErrNoTransaction }

// ErrorClass says how the relay treats a failed send.
type ErrorClass int

const (
	// ClassRejected: the destination refused this message (HTTP 422, a
	// serialization error, an unknown topic). The relay counts an attempt
	// and retries with backoff until max attempts, then dead-letters it.
	// Errors that carry no class are treated as rejected.
	ClassRejected ErrorClass = iota
	// ClassTransient: the destination is unavailable (connection refused,
	// timeout, HTTP 5xx, 408, 429). The relay does not count an attempt; it
	// opens the destination's circuit and puts the rows back. A message
	// that keeps failing transiently while its destination accepts other
	// messages counts attempts instead (docs/concepts.md, "Outages versus
	// poison").
	ClassTransient
	// ClassPermanent: retrying cannot help. The relay dead-letters the
	// message at once.
	ClassPermanent
)

func (c ErrorClass) String() string {
	switch c {
	case ClassTransient:
		return "transient"
	case ClassPermanent:
		return "permanent"
	default:
		return "rejected"
	}
}

type classifiedError struct {
	class ErrorClass
	err   error
}

func (e *classifiedError) Error() string { return e.err.Error() }
func (e *classifiedError) Unwrap() error { return e.err }

// Permanent marks err as not retryable: the relay dead-letters the message
// on this failure instead of retrying it. Permanent(nil) is nil.
func Permanent(err error) error { return classify(err, ClassPermanent) }

// Transient marks err as an outage of the destination rather than a fault
// of the message: the relay pauses the destination and does not count an
// attempt, unless the destination accepts other messages meanwhile
// (docs/concepts.md, "Outages versus poison"). Transient(nil) is nil.
func Transient(err error) error { return classify(err, ClassTransient) }

// Rejected marks err as the destination refusing this message: the relay
// counts an attempt and retries with backoff. Unclassified errors are
// treated the same way; use Rejected to make the intent explicit.
// Rejected(nil) is nil.
func Rejected(err error) error { return classify(err, ClassRejected) }

func classify(err error, c ErrorClass) error {
	if err == nil {
		return nil
	}
	return &classifiedError{class: c, err: err}
}

// Classify returns the class of err: the outermost class marker found by
// errors.As, else ClassRejected.
func Classify(err error) ErrorClass {
	var ce *classifiedError
	if errors.As(err, &ce) {
		return ce.class
	}
	return ClassRejected
}
