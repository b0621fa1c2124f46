package sendertest

import (
	"testing"
	"time"

	"github.com/txbox/txbox/sender"
)

// Harness adapts one sender implementation to the conformance suite.
type Harness struct {
	// NewDestination creates a fresh destination that no other test uses
	// (a unique stream, topic, queue or URL) and removes it when t ends.
	// Required.
	NewDestination func(t *testing.T) *Destination

	// Features says which optional checks apply.
	Features Features

	// UnreachableBound is how long Send may take to report a batch as
	// failed when the destination cannot be reached (the sender's own
	// connect, write and ack timeouts; the suite's context allows twice as
	// long). Defaults to 15s.
	UnreachableBound time.Duration

	// DeliveryTimeout is how long the suite waits for acked messages to
	// become readable at the destination. Defaults to 30s.
	DeliveryTimeout time.Duration
}

// Features are the optional capabilities of a sender and its destination.
// A check whose feature is off is left out (and logged as such), not failed.
type Features struct {
	// SupportsPerMessageReject means Destination.Poison is set and the
	// destination refuses one message while it accepts the rest of the
	// batch (NATS: a subject no stream binds; a webhook: a 422 for one id).
	SupportsPerMessageReject bool
	// SupportsKey means Delivery.Key carries sender.Message.Key.
	SupportsKey bool
	// BrokerDedup means the destination stores a message sent twice with
	// the same event id only once (NATS Nats-Msg-Id within the stream's
	// duplicate window).
	BrokerDedup bool
	// MarksDisconnected means the sender reaches all its routes through
	// one connection (a broker, a server) and marks that connection's
	// failures with sender.Disconnected, so the relay pauses every route
	// at once. The Disconnected check then requires the mark on every
	// error while the destination is down or unreachable; with the flag
	// off it requires no mark (a webhook: each URL is its own
	// destination).
	MarksDisconnected bool
}

// Destination is one isolated destination created by
// Harness.NewDestination.
type Destination struct {
	// Addr is the host:port a sender dials to reach the destination. The
	// suite may put a proxy in front of it and pass the proxy's address to
	// Connect. Required unless Faults is set.
	Addr string

	// Connect returns a sender that reaches the destination through addr
	// (Addr itself, a proxy in front of it, or a closed port), and the
	// route messages for this destination carry. The sender must not fail
	// to build because addr does not answer: Send reports that. The suite
	// closes the sender; Close must be idempotent. Required.
	Connect func(t *testing.T, addr string) (sender.Sender, sender.Route)

	// Received returns every message that has arrived at the destination
	// so far, read through a connection of its own (not through addr).
	// Required.
	Received func(t *testing.T) []Delivery

	// Poison changes m so that the destination refuses it (its route
	// points at nothing, or the destination was told to reject its id).
	// Required when Features.SupportsPerMessageReject.
	Poison func(t *testing.T, m *sender.Message)

	// Faults, when set, replaces the suite's default fault injector (a
	// toxiproxy in front of Addr), for destinations that cannot be reached
	// through a plain TCP proxy (a Kafka broker advertises its own
	// address). It is called once per check that needs one.
	Faults func(t *testing.T) Faults
}

// Delivery is one message as read back from the destination.
type Delivery struct {
	// ID is the destination's native message id (Nats-Msg-Id, AMQP
	// MessageId, Idempotency-Key), or "" when it has none. When set it
	// must equal the event id.
	ID string
	// Payload is the message body.
	Payload []byte
	// Headers are the message's headers as the destination stores them.
	// The suite compares names case-insensitively (HTTP canonicalizes
	// them).
	Headers map[string]string
	// Key is the message key (Kafka record key, the txbox-key header);
	// checked only when Features.SupportsKey.
	Key string
}

// Faults injects faults between a sender and its destination.
type Faults interface {
	// Addr is the address senders dial to go through the fault injector.
	Addr() string
	// SetLatency delays traffic from the destination to the sender (acks,
	// responses) by d, on new and existing connections; 0 removes it.
	SetLatency(t *testing.T, d time.Duration)
	// Down makes the destination unreachable: existing connections are
	// cut and new ones refused.
	Down(t *testing.T)
	// Up undoes Down, on the same address.
	Up(t *testing.T)
}

func (h Harness) unreachableBound() time.Duration {
	if h.UnreachableBound > 0 {
		return h.UnreachableBound
	}
	return 15 * time.Second
}

func (h Harness) deliveryTimeout() time.Duration {
	if h.DeliveryTimeout > 0 {
		return h.DeliveryTimeout
	}
	return 30 * time.Second
}
