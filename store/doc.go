// Package store is the storage seam between txbox's core (outbox, relay,
// inbox, and the txbox command's dead-letter and status tools) and one
// package per SQL dialect (store/postgres, store/mysql, store/sqlite).
//
// The seam follows River's riverdriver: noun-first method names that sort
// together (OutboxInsert, OutboxClaim, OutboxFinish, DeadLetterMove, ...),
// one *Params struct per method, and driver errors translated into txbox
// sentinels here so callers never see a driver's error types.
//
// Every dialect implements the same row lifecycle (see docs/schema.md):
//
//	PENDING → IN_PROCESS → PROCESSED (or deleted)
//	IN_PROCESS → PENDING  (retry later, or lease recovery)
//	IN_PROCESS → FAILED → dead-letter table
//
// and every dialect runs the conformance suite in store/storetest.
// Timestamps always come from the database clock so relays with skewed
// clocks agree.
package store
