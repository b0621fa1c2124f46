// Package kafka feeds an inbox from a franz-go consumer group and commits a
// record's offset only after the inbox handled it.
//
// The event id is read from the txbox-event-id header and the key
// (inbox.Message.Key) from the record key; a CloudEvents record (a
// ce_specversion header, docs/cloudevents.md) gives its id, type and key
// from ce_id, ce_type and ce_subject (the record key when it has no
// subject). A record key equal to the event id is how the Kafka sender
// keys an event without a key: Key is then "".
//
// Create the client with kgo.ConsumerGroup, kgo.ConsumeTopics and
// kgo.DisableAutoCommit (the consumer then commits with CommitRecords after
// each polled batch) or kgo.AutoCommitMarks (it marks records after
// handling them and franz-go commits the marks). With plain auto-commit,
// franz-go commits what was polled, handled or not, so a crash loses
// messages: New logs a warning. Add kgo.BlockRebalanceOnPoll for no
// redelivery across rebalances: the consumer allows rebalances after each
// poll's records are handled and committed, so a partition never moves
// mid-batch.
//
// Each poll takes about Config.BatchDuration worth of records at the
// handling pace measured so far, so a slow handler commits often and a
// crash or a rebalance hands little to another member again
// (docs/inbox.md, "Flow control").
//
// Records of one partition are handled one at a time, in order;
// Config.Concurrency partitions are handled at once (default 1). A record
// whose handler fails is retried with backoff, holding back the records
// after it in its partition (and the next poll), until it succeeds or
// the consumer stops: Kafka has no per-record nack, and committing past a
// failed record would lose it. A handler error marked txbox.Permanent
// skips the record instead (logged as an error). After a rebalance or a
// crash, records are redelivered from the last commit; the inbox reports
// them as duplicates.
//
// The consumer has the lifecycle of the relay: Start, Stop(ctx), Started
// and Stopped (Run(ctx) is Start, then Stop when ctx ends). When it
// stops, no further record starts, the running handlers finish for up to
// Config.DrainTimeout or until Stop's context ends, and what was handled
// is committed.
//
// The handler sees the topic, partition and offset in
// inbox.Message.Delivery, and as Count the consumer's in-place attempt
// (Kafka keeps no delivery count).
package kafka
