// Package consumetest gives the consumer adapters' tests a real inbox on a
// SQLite file and an effect table the handler writes through the inbox
// transaction, so a test can count effects per event id.
package consumetest
