// Package sqlite is txbox's embedded store: the store.Driver seam on SQLite
// through modernc.org/sqlite (pure Go, no cgo). It is the default for
// development, tests, the demo and edge devices.
//
// # Opening
//
// [Open] opens a database file with WAL journaling, synchronous=NORMAL,
// foreign keys off, a busy timeout and transactions that begin with BEGIN
// IMMEDIATE; [Driver.DB] is the pool to run business transactions on.
// [New] wraps a pool the caller opened with modernc.org/sqlite. Call
// [Driver.Migrate] before use; [Migrations] returns the same SQL, each step
// with its revert, for goose, golang-migrate or atlas (`txbox migrate get`
// writes it as files).
//
// # One writer
//
// SQLite admits one write transaction at a time per database file.
// Concurrent claimers therefore never see each other's rows, so the claim
// needs no SKIP LOCKED: it is one UPDATE ... WHERE id IN (SELECT ...
// ORDER BY due_at, id LIMIT n) RETURNING under BEGIN IMMEDIATE. Every
// write transaction of the Driver takes the write lock with its first
// statement (BEGIN IMMEDIATE, or a no-op UPDATE on pools whose DSN does not
// say _txlock=immediate): a deferred transaction that read first would fail
// with SQLITE_BUSY at its first write when another connection wrote in
// between, and the busy handler cannot help it. Inside one process a
// Driver also queues its own writers in Go, so eight claiming goroutines
// take turns without polling SQLite's busy handler; other processes, and
// the caller's transactions, wait in the busy handler up to BusyTimeout.
// Keep business transactions short: they hold the one write lock.
//
// The hot statements (publish one event, claim, finish) are prepared once
// per connection after Migrate. Figures: docs/benchmarks/sqlite.md; the
// schema in detail: docs/schema/sqlite.md.
//
// # Schema (version 1)
//
// Tables, with the default prefix txbox_ (configurable, validated with
// store.ValidateIdentifier and double-quoted):
//
//	txbox_outbox          the outbox (docs/schema.md's columns)
//	txbox_dead_letter     dead letters, same id as the outbox row
//	txbox_inbox           (consumer_name, event_id) PRIMARY KEY, processed_at
//	txbox_lease           (name PRIMARY KEY, holder, lease_until)
//	txbox_schema_version  (version PRIMARY KEY, name, applied_at)
//
// Column types: ids are TEXT in canonical lower-case UUID form; payload is
// BLOB (a plain-SQL TEXT payload is read back as its bytes); headers is a
// TEXT JSON object of strings (default '{}'); timestamps are TEXT
// 'YYYY-MM-DD HH:MM:SS.SSS' in UTC from strftime('%Y-%m-%d %H:%M:%f','now'),
// fixed width so text order is time order. Lease and retry deadlines are
// computed in SQL from the same clock with millisecond precision.
//
// The outbox id default, for plain-SQL inserters that omit it, is a
// UUIDv7 made in SQL: 48 bits of Unix milliseconds from the database
// clock, version 7, variant 10 and 74 bits from random(). Such ids sort by
// time like the ones txbox makes in Go. So a non-Go producer needs only:
//
//	INSERT INTO txbox_outbox (event_type, payload) VALUES ('order-created', '{"id":42}');
//
// Indexes on the outbox are all partial, so each row enters and leaves
// them only on the transitions that matter: the claim (event_type, due_at,
// id) WHERE status = 'PENDING'; lease expiry (lease_until) WHERE
// IN_PROCESS; ordered delivery (event_type, event_key, id) WHERE status IN
// (PENDING, IN_PROCESS, FAILED); FAILED rows by id for the dead-letter
// mover; PROCESSED rows by processed_at for cleanup. An event_key that is
// NULL or empty has no ordering constraint.
package sqlite
