// Package nats feeds an inbox from a NATS JetStream pull consumer
// (nats.go's jetstream package): a message is acked only after the inbox
// settled it (processed, duplicate, or a lost effect in non-transactional
// mode), naked with a delay growing with its delivery count when the
// handler failed, and terminated when it carries no event id or the
// handler returned an error marked txbox.Permanent (a redelivery could not
// fix either).
//
// Create the consumer with AckPolicy AckExplicitPolicy. The adapter pulls
// one message per idle worker, so no message waits in a client buffer
// while its ack-wait timer runs, and tells the server the message is in
// progress while its handler runs: no redelivery without a crash, however
// slow the handler. Config.PullMaxMessages or PullMaxBytes trade that for
// fewer round trips (a streamed pull with a client buffer); then size
// AckWait above ceil(PullMaxMessages / Concurrency) × the longest handler
// time (docs/inbox.md, "Flow control").
//
// The consumer has the lifecycle of the relay: Start, Stop(ctx), Started
// and Stopped (Run(ctx) is Start, then Stop when ctx ends). When it
// stops it drains: it pulls nothing new, lets the running handlers finish
// for up to Config.DrainTimeout or until Stop's context ends, and waits
// for the server to confirm their acks before Stop returns. A fatal pull
// error (the connection closed, the consumer deleted) stops it by itself:
// Stopped is closed, and Err and Stop return the error.
//
// The handler sees the delivery count and the stream and consumer
// sequences in inbox.Message.Delivery. The event id is read from the
// txbox-event-id header, else from Nats-Msg-Id, which txbox's NATS sender
// sets to the same value; the key (inbox.Message.Key) from txbox-key, ""
// when the event has none. A CloudEvents message in binary content mode
// (a ce-specversion header, docs/cloudevents.md) gives its id, type and
// key from ce-id, ce-type and ce-subject.
package nats
