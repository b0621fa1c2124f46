// Package sender defines the seam between the relay and a destination:
// the [Sender] interface, the [Message] it delivers, and how a sender
// reports per-message outcomes.
//
// A Sender must keep the promise "acked means durable, otherwise
// retried": Send returns nil for a message only after the destination
// acknowledged it durably. It should keep many messages in flight (no
// ack-per-message round trip) and classify failures with
// [github.com/txbox/txbox.Transient] (destination unavailable: the relay
// pauses the sender and counts no attempt),
// [github.com/txbox/txbox.Permanent] (dead-letter now), or leave them
// unclassified / [github.com/txbox/txbox.Rejected] (count an attempt and
// retry with backoff).
//
// The relay judges transient failures by destination: a sender names the
// failure domain of a route with [Destinationer] (every sender here does:
// Kafka topic, NATS subject, RabbitMQ exchange, Redis stream key, webhook
// scheme+host+path), and marks failures of its connection itself with
// [Disconnected], which pause every route of the sender. [Provisioner]
// (opt-in) creates at start what the routes need at the destination;
// [Checker] and [ConnectionChecker] let `txbox config check --connect`
// tell, changing nothing, whether a destination exists and whether the
// sender's connection is accepted.
//
// Implementations live in sub-packages (kafka, rabbitmq, nats, webhook,
// redisstream) so a program compiles only the broker clients it uses. Each
// keeps its lifecycle in a [Lifecycle] (Send after Close fails with
// txbox.ErrClosed; Close waits for the Sends in flight before it releases
// the connection) and runs the shared conformance suite in
// sender/sendertest.
package sender
