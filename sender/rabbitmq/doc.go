// Package rabbitmq is the txbox sender for RabbitMQ (AMQP 0-9-1), built on
// github.com/rabbitmq/amqp091-go.
//
// A Send publishes the whole batch on one channel in confirm mode with
// PublishWithDeferredConfirmWithContext, then waits once for every
// publisher confirm, so the batch is pipelined rather than one round trip
// per message. Messages are persistent, carry MessageId = event id (the
// receiver's deduplication key), Type = event type, the event's headers and
// the txbox-* headers. The exchange and routing key come from the route; an
// empty routing key defaults to the event type, an empty exchange is the
// default exchange (routing key = queue name).
//
// Every publish is mandatory. A message no queue is bound for is returned
// by the broker (basic.return) *and then confirmed*: confirm alone would
// report it delivered. The sender listens for returns on each channel and
// correlates them to messages by MessageId; a returned message is rejected
// ([ErrUnroutable]) even though it was confirmed. Because the broker sends
// basic.return before the matching basic.ack, and the client hands returns
// over synchronously, a barrier with the return listener after the confirms
// arrive makes the correlation exact.
//
// Failures are classified for the relay: a nack, an unroutable message or a
// missing exchange is [txbox.Rejected] for that message; a body larger than
// the broker's max_message_size is [txbox.Permanent] and is refused before
// it is published (published, it would make the broker close the channel
// under the rest of the batch; see Config.MaxMessageBytes); a lost
// connection or channel, a failed dial or a confirm that does not arrive
// within ConfirmTimeout is [txbox.Transient], and so is a Send while the
// broker blocks publishers for a resource alarm (connection.blocked: it
// would stop reading the socket and the publish would hang). A failed dial,
// a lost connection (and a channel lost with it) and blocked publishers are
// failures of the connection itself and are also marked
// [sender.Disconnected]: the relay pauses every exchange of the sender.
//
// The relay keys its circuit breaker by the exchange
// ([Sender.Destination]). [Sender.Provision] (opt-in) declares missing
// exchanges at start.
//
// The sender reconnects lazily: the
// first Send after a loss dials again (at most once per ReconnectDelay, so
// during an outage Send fails fast instead of dialing on every call).
package rabbitmq
