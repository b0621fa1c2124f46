package sender

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/txbox/txbox"
)

// Sender delivers batches of messages to one destination.
type Sender interface {
	// Send delivers msgs, pipelined, and waits for the destination's
	// acknowledgement of each. It returns nil when every message was acked.
	// When only some failed it returns a *BatchError with one entry per
	// message (nil = acked). Any other error applies to every message.
	// Send must return promptly when ctx is done; unacked messages then
	// count as failed (transient).
	Send(ctx context.Context, msgs []*Message) error
	// Close flushes what is in flight and releases connections.
	Close(ctx context.Context) error
}

// Message is one event on its way to a destination.
type Message struct {
	ID txbox.ID
	// DeliveryID identifies this delivery of the event to this route: ID
	// for an event type with one route, a route's own row id when the
	// type fans out (docs/concepts.md, "Fan-out"). A destination's native
	// deduplication id (Nats-Msg-Id) is it, so two routes of one event to
	// one JetStream stream are not taken for copies of each other, while
	// the txbox-event-id header, which consumers and inboxes deduplicate by,
	// is ID on every route. Zero means ID.
	DeliveryID txbox.ID
	EventType  string
	// Key is the partition key; empty when the event has none.
	Key     string
	Payload []byte
	// Headers include the event's own headers and the txbox-* headers
	// (txbox.HeaderEventID, HeaderEventType, HeaderCreatedAt).
	Headers   map[string]string
	CreatedAt time.Time
	// Attempt is 1 for the first delivery attempt.
	Attempt int
	// Route is where this message goes, resolved from the event type's
	// settings.
	Route Route
}

// Delivery returns DeliveryID, or ID when it is zero.
func (m *Message) Delivery() txbox.ID {
	if m.DeliveryID != (txbox.ID{}) {
		return m.DeliveryID
	}
	return m.ID
}

// MissingHeaders calls set for each identity header that m.Headers lacks
// and m can fill: [txbox.HeaderEventID], [txbox.HeaderEventType] (when
// EventType is not empty) and [txbox.HeaderCreatedAt] (when CreatedAt is
// not zero, RFC 3339 in UTC). The relay fills them; a sender used on its
// own still delivers the event's identity this way. Nothing is formatted
// for a header that is present: the relay's messages cost no allocation.
func (m *Message) MissingHeaders(set func(k, v string)) {
	if _, ok := m.Headers[txbox.HeaderEventID]; !ok {
		set(txbox.HeaderEventID, m.ID.String())
	}
	if _, ok := m.Headers[txbox.HeaderEventType]; !ok && m.EventType != "" {
		set(txbox.HeaderEventType, m.EventType)
	}
	if _, ok := m.Headers[txbox.HeaderCreatedAt]; !ok && !m.CreatedAt.IsZero() {
		set(txbox.HeaderCreatedAt, m.CreatedAt.UTC().Format(time.RFC3339Nano))
	}
}

// Route says where a message goes. Each sender reads the fields it
// understands: Kafka a topic, NATS a subject, RabbitMQ an exchange and a
// routing key, the webhook a URL, Redis a stream.
type Route struct {
	// Topic is the Kafka topic.
	Topic string
	// Subject is the NATS subject.
	Subject string
	// Exchange is the RabbitMQ exchange; empty is the default exchange.
	Exchange string
	// RoutingKey is the RabbitMQ routing key.
	RoutingKey string
	// URL is the webhook URL.
	URL string
	// Stream is the Redis stream.
	Stream string
	// Format is the wire format of the messages of this route
	// (docs/cloudevents.md). Empty takes the sender's.
	Format Format
}

// HeaderKey carries [Message.Key] on destinations that have no native key
// field (NATS, HTTP webhooks). Senders set it only when the key is not
// empty, so a consumer can still group or order by aggregate.
const HeaderKey = "txbox-key"

// Placeholder substituted in route templates.
const PlaceholderEventType = "{event_type}"

// Expand returns r with every "{event_type}" replaced by eventType, so one
// default route template such as topic "{event_type}" serves every type.
// Format is copied as it is.
func (r Route) Expand(eventType string) Route {
	rep := func(s string) string { return strings.ReplaceAll(s, PlaceholderEventType, eventType) }
	return Route{
		Topic: rep(r.Topic), Subject: rep(r.Subject), Exchange: rep(r.Exchange),
		RoutingKey: rep(r.RoutingKey), URL: rep(r.URL), Stream: rep(r.Stream),
		Format: r.Format,
	}
}

// BatchError reports per-message outcomes of a partially failed Send.
type BatchError struct {
	// Errs has one entry per message passed to Send, in order; nil means
	// that message was acked.
	Errs []error
}

func (e *BatchError) Error() string {
	n := 0
	var first error
	for _, err := range e.Errs {
		if err != nil {
			if first == nil {
				first = err
			}
			n++
		}
	}
	if first == nil {
		return "sender: batch error with no failures"
	}
	return fmt.Sprintf("sender: %d of %d messages failed; first: %v", n, len(e.Errs), first)
}

// Results expands the error returned by Send into one error per message:
// nil err means all nil; a *BatchError gives its entries; any other error
// is repeated for every message.
func Results(err error, n int) []error {
	out := make([]error, n)
	if err == nil {
		return out
	}
	if be, ok := err.(*BatchError); ok && len(be.Errs) == n {
		copy(out, be.Errs)
		return out
	}
	for i := range out {
		out[i] = err
	}
	return out
}

// Summarize turns per-message outcomes (one entry per message, nil =
// acked) into what Send returns: nil when every message was acked; the
// first error alone when every message failed transiently (one outage,
// not n copies of it); otherwise a *BatchError. It is the inverse of
// Results.
func Summarize(errs []error) error {
	failed, transient := 0, 0
	var first error
	for _, err := range errs {
		if err == nil {
			continue
		}
		failed++
		if first == nil {
			first = err
		}
		if txbox.Classify(err) == txbox.ClassTransient {
			transient++
		}
	}
	switch {
	case failed == 0:
		return nil
	case transient == len(errs):
		return first
	default:
		return &BatchError{Errs: errs}
	}
}
