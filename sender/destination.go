package sender

import (
	"errors"
	"strings"
)

// Destinationer is implemented by senders that know which part of a
// [Route] names one failure domain: a Kafka topic, a NATS subject, a
// RabbitMQ exchange, a webhook's scheme, host and path. The relay keys its
// circuit breaker by sender name plus this value, so one failing route
// pauses only the event types routed to it (docs/concepts.md, "Outages
// versus poison").
type Destinationer interface {
	// Destination returns a stable name for the destination r resolves to
	// on this sender. Routes that return the same value share a circuit.
	Destination(r Route) string
}

// DestinationOf returns the destination name of r on s: s's own answer
// when it implements [Destinationer], else every non-empty field of r, so
// two routes share a circuit only when they are the same route.
func DestinationOf(s Sender, r Route) string {
	if d, ok := s.(Destinationer); ok {
		return d.Destination(r)
	}
	var b strings.Builder
	for _, f := range [...]struct{ name, v string }{
		{"topic", r.Topic}, {"subject", r.Subject}, {"stream", r.Stream},
		{"exchange", r.Exchange}, {"routing-key", r.RoutingKey}, {"url", r.URL},
	} {
		if f.v == "" {
			continue
		}
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(f.name)
		b.WriteByte('=')
		b.WriteString(f.v)
	}
	return b.String()
}

// disconnectedError marks a failure of the connection to the broker
// itself rather than of one destination on it.
type disconnectedError struct{ err error }

func (e *disconnectedError) Error() string { return e.err.Error() }
func (e *disconnectedError) Unwrap() error { return e.err }

// Disconnected marks err as a failure of the sender's connection itself:
// NATS disconnected, every Kafka broker unreachable, the AMQP connection
// closed. The relay then pauses every route of the sender at once, without
// counting attempts, instead of only the destination that saw the error.
// The mark does not change how err classifies: wrap a transient error
// ([github.com/txbox/txbox.Transient]) so that the messages are released.
// Disconnected(nil) is nil.
func Disconnected(err error) error {
	if err == nil {
		return nil
	}
	return &disconnectedError{err: err}
}

// IsDisconnected reports whether err, or an error it wraps, was marked by
// [Disconnected].
func IsDisconnected(err error) bool {
	var de *disconnectedError
	return errors.As(err, &de)
}

// QuickAcker is implemented by senders whose destination acknowledges a
// batch within milliseconds: the brokers (NATS JetStream, Kafka,
// RabbitMQ, Redis Streams). The relay gives their event types the lock
// claim by default where the store has one (docs/concepts.md, "Claim
// modes"): a transaction held open until a broker's acks arrive is short,
// while one held open for a slow webhook would keep the rows locked and
// the database's cleanup horizon pinned for as long as the endpoint takes.
// Senders that do not implement it (webhooks, custom senders) default to
// the lease claim.
type QuickAcker interface {
	// AcksQuickly reports whether the destination acknowledges within
	// milliseconds.
	AcksQuickly() bool
}

// AcksQuickly reports whether s implements [QuickAcker] and says its
// destination acknowledges within milliseconds.
func AcksQuickly(s Sender) bool {
	q, ok := s.(QuickAcker)
	return ok && q.AcksQuickly()
}
