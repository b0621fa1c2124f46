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
// returned a result that settles it (inbox.Result.Acknowledge: processed,
// duplicate, or an effect lost in non-transactional mode), so a crash at
// any point leads to a redelivery, which the inbox turns into a no-op when
// the effect was already committed. Every adapter takes from its broker
// about what its handlers can start, fills inbox.Message.Delivery with the
// broker's delivery count, redelivery flag and position, and stops
// gracefully: once stopping began it takes nothing new, lets running
// handlers finish for up to DrainTimeout (DefaultDrainTimeout), then
// cancels them. The broker adapters (kafka, nats, rabbitmq) have the
// relay's lifecycle: Start, Stop(ctx) (which may cut the handlers sooner
// when its context ends), Started and Stopped, and Err for what stopped
// one by itself; their Run(ctx) is Start, then Stop when ctx ends. Each
// adapter's Config takes either one Inbox or Tenants, an inbox.Tenants
// that routes each message to its tenant's inbox by the txbox-tenant
// header (docs/multi-tenant.md, "Consumers"). See docs/inbox.md.
package consume
