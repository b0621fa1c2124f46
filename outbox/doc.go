// Package outbox publishes events inside the caller's database transaction:
// the producer side of the Transactional Outbox pattern.
//
// A [Publisher] writes each event as a row of the outbox table through the
// transaction the caller already has open (pgx.Tx, *sql.Tx, or an ORM
// transaction), so the event commits or rolls back with the business data.
// It never begins, commits or rolls back a transaction itself, and it
// refuses to run without one (txbox.ErrNoTransaction) instead of silently
// autocommitting. A relay (package relay) later delivers the committed rows.
//
// Before anything reaches the database, Publish validates every event type,
// enforces the payload size limit with a *txbox.PayloadTooLargeError,
// assigns a UUIDv7 to events without an id, and copies the W3C trace
// context of ctx (traceparent/tracestate) into the event's headers so the
// relay and the consumers can continue the trace. A batch is one insert
// statement: one round trip whatever its size.
//
// [PublishJSON] and [NewJSONEvent] marshal Go values; [PublishResult] runs a
// function inside the caller's transaction and publishes its result, the Go
// analogue of a declarative "publish the method's return value" annotation.
//
// [Publisher.Publish] takes the transaction as any, which suits ORMs whose
// transaction type is only known at run time, but refuses a wrong value
// only at run time. [NewTxPublisher] fixes the type from the store
// (postgres.Driver.Pgx for pgx.Tx, SQL for *sql.Tx, ORM for
// store.ExecTx), so that a pool or another driver's transaction does not
// compile (docs/orm.md).
//
// This package imports no database driver: it talks to the store through
// the store.Outbox seam, so the same Publisher works over PostgreSQL, MySQL
// and SQLite.
package outbox
