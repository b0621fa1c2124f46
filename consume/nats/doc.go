// Package nats feeds an inbox from a NATS JetStream consumer (nats.go's
// jetstream package): a message is acked only after the inbox handled it
// (processed or duplicate), naked with a delay growing with its delivery
// count when the handler failed, and terminated when it carries no event
// id or the handler returned an error marked txbox.Permanent (a redelivery
// could not fix either).
//
// Create the consumer with AckPolicy AckExplicitPolicy and an AckWait
// longer than the slowest handler: a message not acked within AckWait is
// redelivered while the first delivery may still be running, which the
// inbox then absorbs, but at the cost of a second lookup.
//
// The event id is read from the txbox-event-id header, else from
// Nats-Msg-Id, which txbox's NATS sender sets to the same value.
package nats
