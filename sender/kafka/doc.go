// Package kafka is the txbox sender for Apache Kafka, built on
// github.com/twmb/franz-go.
//
// Every batch the relay hands over is produced with one promise per record
// and awaited once, so the whole batch is in flight together (franz-go
// batches it further per partition). The producer is idempotent (franz-go's
// default) and writes with acks=all, so an acked record survives the loss of
// the partition leader; the broker also discards the duplicates of its own
// internal retries.
//
// Records carry the message key as the Kafka key (the event id when the
// event has none, so one event always lands in one partition), every event
// header as a record header, and the txbox-* headers. The topic is the
// route's Topic.
//
// Failures are classified for the relay:
//
//   - the record is larger than the producer or the topic accepts
//     (MESSAGE_TOO_LARGE, RECORD_LIST_TOO_LARGE): [txbox.Permanent], so it
//     is dead-lettered on its first try, with the sizes and the limits to
//     raise;
//   - the broker refused this record otherwise (UNKNOWN_TOPIC_OR_PARTITION,
//     INVALID_RECORD, ...): [txbox.Rejected] for that record only; the
//     relay counts an attempt;
//   - the cluster is unreachable, retriable broker errors exhausted their
//     retries, the record waited past [Config.DeliveryTimeout], or the
//     cluster refuses this producer as a whole (CLUSTER_AUTHORIZATION_FAILED,
//     SASL failures): [txbox.Transient]; the relay pauses the topic and
//     counts no attempt. When a whole batch failed so and not one broker
//     answers a ping either, the errors are also marked
//     [sender.Disconnected]: the relay pauses every topic of the sender. A
//     topic whose partitions have no leader, while the brokers answer, is
//     not marked.
//
// The relay keys its circuit breaker by the topic ([Sender.Destination]).
// [Sender.Provision] (opt-in) creates missing topics at start.
//
// Size limits: txbox accepts payloads up to 1 MiB at publish time by
// default, while a Kafka broker accepts record batches up to
// max.message.bytes (1,048,588 by default, headers and batch overhead
// included) and franz-go cuts batches at 1,000,012 bytes unless
// [Config.MaxRecordBytes] says otherwise. A payload near the publish limit
// is therefore refused (permanent, dead-lettered at once): keep the publish
// limit below the topic's max.message.bytes, or raise both that and
// MaxRecordBytes (docs/operations.md, "Message size limits").
//
// DeliveryTimeout bounds how long a Send can take during an outage; without
// it franz-go would retry forever and the relay would never learn that the
// destination is down. For the same reason the client allows idempotent
// produce cancellation: a record whose request was written but never
// answered fails after the timeout instead of waiting for an answer that
// may never come. Its outcome is then unknown; the relay retries it and the
// receiver's inbox absorbs the duplicate, which is the outbox's contract.
// The produce request timeout and franz-go's request overhead split the
// delivery timeout between them, so even a broker that hangs without
// closing its connection is reported within DeliveryTimeout.
package kafka
