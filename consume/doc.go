// Package consume holds what the broker consumer adapters share: turning a
// received message into an inbox.Message (the event id comes from the
// txbox-event-id header) and a bounded retry backoff. Each broker has its
// own subpackage, so a service compiles only the client it uses:
//
//   - consume/kafka: a franz-go consumer group; offsets are committed only
//     after the handler returned.
//   - consume/rabbitmq: manual acks; nack with requeue when the handler
//     failed.
//   - consume/nats: a JetStream consumer; ack after the handler, nak on
//     failure.
//   - consume/webhook: an http.Handler for txbox's webhook sender, with
//     HMAC verification; 2xx only once the effect is committed.
//
// Every adapter acknowledges a message only after inbox.Inbox.Handle
// returned Processed or Duplicate, so a crash at any point leads to a
// redelivery, which the inbox turns into a no-op when the effect was
// already committed.
package consume
