// Package rabbitmq feeds an inbox from a RabbitMQ queue with manual
// acknowledgements (amqp091-go): a delivery is acked only after the inbox
// handled it (processed or duplicate), nacked with requeue when the handler
// failed (after a backoff, so a failing message does not spin), and
// rejected without requeue when it carries no event id or the handler
// returned an error marked txbox.Permanent, which sends it to the queue's
// dead-letter exchange if one is configured.
//
// The event id is read from the txbox-event-id header, else from the
// message id property, which txbox's RabbitMQ sender sets to the same
// value.
package rabbitmq
