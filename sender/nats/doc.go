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
//   - Nats-Msg-Id is the event id, so JetStream drops a resent copy within
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
//   - no stream binds the subject (JetStream answers "no responders"):
//     Rejected, the "unroutable" case of the spec, which counts an attempt
//     and is retried with backoff before it is dead-lettered (a stream may
//     be created in the meantime);
//   - JetStream refuses the message with an API error: Rejected (e.g. the
//     stream's maximum message size), except 5xx codes, which are
//     Transient: a stream full under DiscardNew (503 "maximum messages
//     exceeded") is the destination out of room, not the message's fault;
//   - a message that cannot be published at all (no subject, an invalid
//     subject or header, larger than the server's max_payload): Permanent;
//   - not connected, disconnected while waiting, ack timeout, context
//     done: Transient. The outcome of a message whose ack did not arrive is
//     unknown; the relay retries it and Nats-Msg-Id absorbs the copy.
//
// A Sender made by [New] owns its connection: it connects in the
// background (so the relay starts while NATS is down, and Send reports
// Transient until it is up), reconnects forever, and buffers nothing while
// disconnected (a publish fails at once instead of waiting in a buffer).
// [NewFromConn] uses a connection you manage.
package nats
