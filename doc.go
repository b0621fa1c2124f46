// Package txbox is a library and relay daemon for the Transactional Outbox
// and Inbox patterns.
//
// A service writes an [Event] as a row in the same database transaction as
// its business data (package outbox). A relay (package relay) later claims
// the row, delivers it to a broker or an HTTP endpoint through a
// [github.com/txbox/txbox/sender.Sender], and marks it done only after the
// destination acknowledged it. Delivery is at-least-once; the receiving side
// drops duplicates through an inbox (package inbox).
//
// This package holds the types every other package shares: events and their
// ids, event-type validation, the header names added on delivery, and the
// error classification senders use to tell an outage from a bad message.
// It also holds the relay's vocabulary, so that a program that configures
// or observes a relay needs no other import for it: the per-type settings'
// values ([Ordering], [CommitHorizon], [ClaimMode]), the hook interface
// [RelayHook] and its events, and the health report /readyz answers
// ([HealthReport]).
package txbox
