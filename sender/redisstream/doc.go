// Package redisstream is the txbox sender for Redis Streams, built on
// github.com/redis/go-redis/v9.
//
// A Send pipelines one XADD per message (one round trip for the whole
// batch). Each stream entry has the fields
//
//	id       the event id (the receiver's deduplication key)
//	type     the event type
//	key      the partition key ("" when the event has none)
//	payload  the payload bytes, unchanged
//	headers  the event headers and the txbox-* headers, as a JSON object
//
// In the cloudevents format (Config.CloudEvents, or the route's Format;
// docs/cloudevents.md) the entry has one field per CloudEvents attribute,
// named after it (specversion, id, source, type, subject, time,
// datacontenttype, traceparent), the payload as data, and headers as
// above.
//
// The stream is the route's Stream, or its Topic when Stream is empty. With
// MaxLen set, each XADD trims the stream approximately (MAXLEN ~ n), which
// is cheap and keeps it bounded.
//
// Redis acknowledges an XADD when the entry is in memory; durability is the
// server's persistence setting (AOF with appendfsync), not the sender's.
// Redis Streams have no broker-side deduplication: a retried batch may add
// an event twice, which the receiver's inbox absorbs.
//
// Failures are classified for the relay: an error reply about one command
// (the key holds another type: WRONGTYPE; an invalid argument) is
// [txbox.Rejected] for that message; a connection error, a timeout, a
// cancelled context, or a reply with which Redis refuses every write for a
// while (OOM, LOADING, MISCONF, READONLY, NOAUTH, ...) is [txbox.Transient]
// for the messages whose outcome is not known, so a full or read-only Redis
// pauses the relay instead of dead-lettering the backlog. A failure to
// reach the server itself (a refused or failed dial, a connection reset or
// closed) is also marked [github.com/txbox/txbox/sender.Disconnected]: the
// relay pauses every stream of the sender, which all live on that server.
// The relay keys its circuit breaker by the stream key
// ([Sender.Destination]).
package redisstream
