// Package consumetest gives the consumer adapters' tests a real inbox on a
// SQLite file and an effect table the handler writes through the inbox
// transaction, so a test can count effects per event id, and the whole
// pipeline (outbox, relay on PostgreSQL, broker, consumer, inbox) for
// their end-to-end tests.
//
// It is test support of this module only. It publishes with the outbox
// and delivers with the relay, so it lives under internal/ rather than
// under consume/: no package under consume/ imports the outbox or the
// relay.
package consumetest
