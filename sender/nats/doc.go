// Package nats is the txbox sender for NATS JetStream.
//
// A batch is published asynchronously (JetStream PublishMsgAsync) as a
// whole, and only then does Send wait for the acks, so a batch costs about
// one round trip however large it is. A message is acked once JetStream
// stored it in a stream.
//
// Each message goes to its route's Subject, which a stream must bind; the
// route's other fields (Stream included: the relay's default route fills
// it in for Redis Streams) are ignored. Headers:
//
//   - Nats-Msg-Id is the event id (for a route of a fanned-out type, the
//     route's delivery id, [sender.Message.Delivery], so two routes to one
//     stream are not taken for copies), so JetStream drops a resent copy within
//     the stream's duplicate window (2 minutes by default): the relay's
//     retries after an unknown outcome do not reach consumers twice. A
//     resend later than the window (after a long outage) is stored again;
//     the consumer's inbox absorbs that copy;
//   - every message header travels as a NATS header of the same name,
//     including txbox-event-id, txbox-event-type, txbox-created-at, and
//     txbox-key when the event has a key (names keep their case; NATS
//     trims the whitespace around a value; a name NATS cannot carry, or a
//     value with CR or LF, fails the message Permanent instead of being
//     altered);
//   - message headers named Nats-* are refused (Permanent): they steer
//     JetStream itself (Nats-Rollup purges a subject, Nats-Expected-*
//     adds preconditions) and must not come from event data.
//
// How failures are classified (see [github.com/txbox/txbox.Classify]):
//
//   - JetStream answers "no responders" (nothing listens on the subject):
//     one stream lookup, shared by the batch and reused for a few
//     seconds, tells why. No stream binds the subject: Rejected
//     ([ErrNoStream], the "unroutable" case, counted as an attempt and
//     retried with backoff, since a stream may be created meanwhile). A
//     stream binds it but did not answer (leader election, restore), or
//     JetStream did not answer the lookup either (disabled, restarting):
//     Transient ([ErrStreamUnavailable]), no attempt burned;
//   - a message that can never be published as it is: Permanent, on its
//     first try. No subject, an invalid subject or header, larger than the
//     server's max_payload (read from the server at connect; payload and
//     headers count, the error gives the sizes), larger than the stream's
//     max_msg_size (API error 10054);
//   - JetStream refuses the message with another API error: Rejected,
//     except 5xx codes, which are Transient: a stream full under
//     DiscardNew (503 "maximum messages exceeded"), JetStream not enabled,
//     no quorum are the destination, not the message;
//   - not connected, disconnected or reconnecting while publishing or
//     waiting, the connection closed: Transient and marked
//     [sender.Disconnected], so the relay pauses every subject of the
//     sender at once. A Send while not connected names the servers
//     (without credentials) and the last dial error;
//   - ack timeout, context done: Transient. The outcome of a message
//     whose ack did not arrive is unknown; the relay retries it and
//     Nats-Msg-Id absorbs the copy.
//
// The relay keys its circuit breaker by the subject ([Sender.Destination]).
//
// Streams: JetStream stores a message only when a stream binds its subject.
// [Sender.Provision] (opt-in; `provision: true` in the relay's
// configuration) creates or extends a stream at start so that it binds the
// routes' subjects; see docs/configuration.md.
//
// A Sender made by [New] owns its connection: it connects in the
// background (so the relay starts while NATS is down, and Send reports
// Transient until it is up), reconnects forever, logs each failed connect
// with the dial error and the server address (the first of an outage at
// once, then once a minute or when the error changes), and buffers nothing
// while disconnected (a publish fails at once instead of waiting in a
// buffer).
// [NewFromConn] uses a connection you manage.
package nats
