// Package rabbitmq feeds an inbox from a RabbitMQ queue with manual
// acknowledgements (amqp091-go): a delivery is acked only after the inbox
// settled it (processed, duplicate, or a lost effect in non-transactional
// mode), nacked with requeue when the handler failed (after a backoff, so
// a failing message does not spin), and rejected without requeue when it
// carries no event id or the handler returned an error marked
// txbox.Permanent, which sends it to the queue's dead-letter exchange if
// one is configured.
//
// The prefetch defaults to Config.Concurrency, so the broker hands this
// consumer only what it handles at once: nothing waits in the client while
// other consumers of the queue idle, and a crash requeues only the
// deliveries in the handlers.
//
// The consumer has the lifecycle of the relay: Start, Stop(ctx), Started
// and Stopped (Run(ctx) is Start, then Stop when ctx ends). When it stops
// it cancels its broker consumer, requeues what it received but did not
// start, and lets the running handlers finish for up to
// Config.DrainTimeout or until Stop's context ends. When the broker
// closes the deliveries (channel or connection lost, queue deleted) it
// stops by itself: Stopped is closed, and Err and Stop return
// ErrDeliveriesClosed.
//
// The handler sees the redelivered flag, the delivery tag and, on quorum
// queues, the delivery count in inbox.Message.Delivery. The event id is
// read from the txbox-event-id header, else from the message id property,
// which txbox's RabbitMQ sender sets to the same value; the key
// (inbox.Message.Key) from the txbox-key header, "" when the event has
// none (never the routing key, which is the event type by default). A
// CloudEvents
// message (a cloudEvents:specversion header, docs/cloudevents.md) gives
// its id, type and key from cloudEvents:id, cloudEvents:type and
// cloudEvents:subject.
package rabbitmq
