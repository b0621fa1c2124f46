package store

import (
	"context"
	"time"

	"github.com/txbox/txbox"
)

// Row status values, stored as text in the outbox table's status column.
const (
	StatusPending        = "PENDING"
	StatusInProcess      = "IN_PROCESS"
	StatusProcessed      = "PROCESSED"
	StatusFailed         = "FAILED"
	DeadLetterUnresolved = "UNRESOLVED"
	DeadLetterResolved   = "RESOLVED"
)

// Driver is everything a dialect provides. It is composed of smaller
// interfaces so a caller can ask for only what it uses.
type Driver interface {
	Outbox
	DeadLetters
	Leases
	AuditLog
	// Dialect names the SQL dialect: "postgres", "mysql" or "sqlite".
	Dialect() string
	// Migrate applies the embedded migrations that are not yet applied,
	// under a database lock so instances starting together are safe.
	Migrate(ctx context.Context) error
	// Close releases what the driver itself opened. A pool passed in by the
	// caller is not closed.
	Close() error
}

// Outbox is the part of the seam that publishing and the relay use.
type Outbox interface {
	// OutboxInsert inserts events inside the caller's open transaction tx
	// (pgx.Tx, *sql.Tx, or a value with ExecContext and Commit methods) in
	// one round trip. It never begins, commits or rolls back. Events must
	// already be validated and carry their ids. It returns
	// txbox.ErrNoTransaction (or an *txbox.UnsupportedTxError, which matches
	// it) when tx is not an open transaction it can use.
	OutboxInsert(ctx context.Context, tx any, params *OutboxInsertParams) error

	// OutboxClaim claims up to Limit due PENDING rows of one event type,
	// ordered by due time then id, skipping rows locked by other claimers,
	// and marks them IN_PROCESS with lease_until = now() + LeaseDuration and
	// one fresh lease token for the batch. It holds no transaction open
	// after it returns.
	OutboxClaim(ctx context.Context, params *OutboxClaimParams) ([]*OutboxRow, error)

	// OutboxFinish records the outcome of sent rows. Every item is fenced by
	// its lease token: an item whose row is no longer IN_PROCESS with that
	// token changes nothing and is counted in Fenced.
	OutboxFinish(ctx context.Context, params *OutboxFinishParams) (*OutboxFinishResult, error)

	// OutboxRecover puts up to Limit IN_PROCESS rows whose lease expired
	// back to PENDING, due now, without counting an attempt. It returns the
	// number recovered.
	OutboxRecover(ctx context.Context, params *OutboxRecoverParams) (int, error)

	// OutboxPendingTypes lists the event types that have PENDING rows,
	// cheaply (a loose index scan on PostgreSQL), so the relay can start
	// pollers for types nobody configured.
	OutboxPendingTypes(ctx context.Context) ([]string, error)

	// OutboxStats returns per-type counts and the age of the oldest pending
	// row, measured on the database clock.
	OutboxStats(ctx context.Context) ([]*OutboxTypeStats, error)

	// OutboxCleanup deletes up to Limit PROCESSED rows processed more than
	// OlderThan ago and returns how many it deleted.
	OutboxCleanup(ctx context.Context, params *CleanupParams) (int, error)
}

// DeadLetters is the part of the seam for the dead-letter table.
type DeadLetters interface {
	// DeadLetterMove moves up to Limit FAILED outbox rows into the
	// dead-letter table in one transaction (lock, insert, delete) and
	// returns how many it moved.
	DeadLetterMove(ctx context.Context, params *DeadLetterMoveParams) (int, error)
	// DeadLetterList lists dead letters matching the filter, newest failure
	// first, after the cursor. It reads each payload's size, never the
	// payload: Payload is nil, PayloadSize set, so a page weighs the same
	// however large the payloads are.
	DeadLetterList(ctx context.Context, params *DeadLetterListParams) ([]*DeadLetter, error)
	// DeadLetterListIDs lists like DeadLetterList but reads only each
	// dead letter's id, failure time and status: what bulk actions walk
	// (DeadLetterWalk).
	DeadLetterListIDs(ctx context.Context, params *DeadLetterListParams) ([]DeadLetterEntry, error)
	// DeadLetterCount counts dead letters matching the filter.
	DeadLetterCount(ctx context.Context, filter *DeadLetterFilter) (int64, error)
	// DeadLetterGet returns one dead letter with its payload, or
	// txbox.ErrNotFound.
	DeadLetterGet(ctx context.Context, id txbox.ID) (*DeadLetter, error)
	// DeadLetterRetry moves the given dead letters back to the outbox as
	// PENDING, due now, attempts reset to 0, keeping their ids and their
	// last error, in one transaction. It returns how many it moved. An id
	// that is unknown, already back in the outbox (a producer published it
	// again), or whose headers are not a JSON object (a plain-SQL row the
	// schema now refuses; it could only fail again) stays where it is and
	// is not counted: one such id never fails the others.
	DeadLetterRetry(ctx context.Context, ids []txbox.ID) (int, error)
	// DeadLetterResolve marks the given dead letters RESOLVED (kept until
	// the dead-letter TTL, then cleaned up). It returns how many changed.
	DeadLetterResolve(ctx context.Context, ids []txbox.ID) (int, error)
	// DeadLetterDelete deletes the given dead letters at once.
	DeadLetterDelete(ctx context.Context, ids []txbox.ID) (int, error)
	// DeadLetterFingerprint fingerprints up to Limit dead letters that
	// have no fingerprint yet (new ones, and those stored before
	// fingerprints were), with params.Print, and returns how many it
	// wrote. A row a concurrent caller is fingerprinting is waited for
	// and then skipped, so fewer than Limit means none was left.
	DeadLetterFingerprint(ctx context.Context, params *DeadLetterFingerprintParams) (int, error)
	// DeadLetterGroups lists the failure groups of the fingerprinted dead
	// letters, largest first (count desc, fingerprint desc), each with
	// its newest dead letter as its sample.
	DeadLetterGroups(ctx context.Context, params *DeadLetterGroupsParams) ([]*DeadLetterGroup, error)
	// DeadLetterCleanup deletes up to Limit RESOLVED dead letters resolved
	// more than OlderThan ago.
	DeadLetterCleanup(ctx context.Context, params *CleanupParams) (int, error)
}

// Leases is the part of the seam for database leases, which let one
// instance at a time run a job such as cleanup.
type Leases interface {
	// LeaseAcquire takes or renews the named lease for Holder until
	// now() + TTL. It returns true when Holder holds it afterwards: the
	// lease was free, expired, or already Holder's.
	LeaseAcquire(ctx context.Context, params *LeaseParams) (bool, error)
	// LeaseRelease gives the lease up if Holder holds it.
	LeaseRelease(ctx context.Context, params *LeaseParams) error
}

// OutboxInsertParams are the parameters of Outbox.OutboxInsert.
type OutboxInsertParams struct {
	// Events to insert, validated, with ids assigned.
	Events []*txbox.Event
	// Notify asks dialects with wake-ups (PostgreSQL NOTIFY) to signal
	// listening relays when the transaction commits.
	Notify bool
}

// OutboxClaimParams are the parameters of Outbox.OutboxClaim.
type OutboxClaimParams struct {
	// EventType is the one type to claim.
	EventType string
	// Route is the one fan-out route to claim (OutboxRow.Route): only
	// rows whose route equals it are taken, "" for a type with one route.
	// With OrderedByKey and a Route, a row of the same type and key that
	// has route "" (not expanded yet) and is earlier in key order also
	// holds the key back, and an unresolved dead letter of the same type
	// and key parks it when its route is Route or "" (a dead letter from
	// before the type had routes: retried, it is expanded to every route).
	Route string
	// Limit is the batch size, at least 1.
	Limit int
	// LeaseDuration is how long the claim is exclusive. After it the row
	// may be recovered and claimed by another relay.
	LeaseDuration time.Duration
	// OrderedByKey makes a row claimable only when no row of the same type
	// and key earlier in the key's order ((Seq, ID), see OutboxRow.Seq) is
	// PENDING, IN_PROCESS or FAILED, and no unresolved dead letter has
	// that type and key; on PostgreSQL also only once the row is behind
	// the commit horizon (HorizonOff; docs/concepts.md, "Ordering").
	OrderedByKey bool
	// KeyRun, with OrderedByKey, is the most rows of one key the claim may
	// take: the key's claimable head and the rows right behind it in key
	// order, as long as each is PENDING and due (the run stops at the
	// first row that is not). 0 or 1 takes the head only. A caller that
	// asks for runs must deliver a key's rows one after the other, each
	// only after the previous one was acknowledged, and must release the
	// rest of a key's run unsent when one of its rows fails, so order
	// holds (the relay does: relay/ordered.go). Rows are handed out in
	// (due_at, id) order as always, so a run is in key order (see
	// OutboxRow.Seq) only within its key.
	KeyRun int
	// HorizonOff, with OrderedByKey, turns the commit horizon off
	// (commit-horizon: off, docs/concepts.md, "Ordering"): a key's head
	// is taken as soon as this snapshot sees no earlier row of its key,
	// even when a transaction still in progress may commit one. Only for
	// producers that never overlap on a key. Dialects without a horizon
	// ignore it.
	HorizonOff bool
	// HorizonCut is set by the claim, not by the caller: how many keys had
	// a due head (or a run) that the commit horizon held back because a
	// transaction older than it was still in progress. A caller that sees
	// it non-zero should wait briefly before claiming the type again,
	// rather than at once: the horizon moves only when that transaction
	// ends.
	HorizonCut int
	// FenceOff is the former name of HorizonOff; the in-tree drivers
	// turn the horizon off when either is set.
	//
	// Deprecated: use HorizonOff.
	FenceOff bool
	// FenceCut is the former name of HorizonCut; the in-tree drivers set
	// both.
	//
	// Deprecated: use HorizonCut.
	FenceCut int
}

// OutboxRow is a claimed row.
type OutboxRow struct {
	ID         txbox.ID
	EventType  string
	Key        string
	Payload    []byte
	Headers    map[string]string
	Attempts   int
	CreatedAt  time.Time
	LeaseToken txbox.ID
	// Seq is the row's place in its key's order, before its id: a key's
	// rows are delivered in (Seq, ID) order. It is the producer's
	// transaction id on PostgreSQL and the rowid the INSERT assigned on
	// SQLite (docs/concepts.md, "Ordering"); 0 where the dialect orders a
	// key by id alone (MySQL/MariaDB) and for rows older than the column.
	Seq uint64
	// Route names the fan-out route this row delivers to
	// (docs/concepts.md, "Fan-out"): "" for an event type with one route,
	// and for a fan-out event not expanded yet (OutboxExpand).
	Route string
	// EventID is the id of the event this row delivers when it is not the
	// row's own ID: set on the rows that OutboxExpand added for the second
	// and further routes of an event, zero otherwise. Every route's row of
	// one event shows the consumers the same id (Event).
	EventID txbox.ID
	// Invalid is non-empty when the row could not be turned into a
	// message, for example a headers value written by a plain-SQL
	// producer that is not a JSON object. It says why. The relay does not
	// send such a row: it fails it at once with this reason, so it goes to
	// the dead-letter table and the rest of its batch is delivered.
	Invalid string
}

// Event is the id of the event the row delivers: EventID when set, else
// ID. It is the id the consumers see, the same on every route.
func (r *OutboxRow) Event() txbox.ID {
	if r.EventID != (txbox.ID{}) {
		return r.EventID
	}
	return r.ID
}

// Outcome is what happened to one claimed row.
type Outcome int

const (
	// OutcomeAcked: the destination acknowledged it. The row becomes
	// PROCESSED (or is deleted when OutboxFinishParams.DeleteAcked).
	OutcomeAcked Outcome = iota
	// OutcomeRetry: the send failed because of the message. attempts+1,
	// back to PENDING, due after RetryAfter, last error recorded.
	OutcomeRetry
	// OutcomeFailed: attempts exhausted or permanent error. attempts+1,
	// FAILED, last error recorded; the dead-letter mover takes it.
	OutcomeFailed
	// OutcomeReleased: not sent or the destination was unavailable. Back to
	// PENDING, due after RetryAfter, attempts unchanged.
	OutcomeReleased
)

// OutboxFinishItem is the outcome of one claimed row.
type OutboxFinishItem struct {
	ID         txbox.ID
	LeaseToken txbox.ID
	Outcome    Outcome
	// RetryAfter delays the next claim for OutcomeRetry and
	// OutcomeReleased: due_at = now() + RetryAfter.
	RetryAfter time.Duration
	// Error is stored as last error for OutcomeRetry and OutcomeFailed.
	Error string
}

// OutboxFinishParams are the parameters of Outbox.OutboxFinish.
type OutboxFinishParams struct {
	Items []OutboxFinishItem
	// DeleteAcked deletes acked rows instead of marking them PROCESSED
	// (outbox retention 0).
	DeleteAcked bool
}

// OutboxFinishResult reports what OutboxFinish changed.
type OutboxFinishResult struct {
	// Finished counts items applied.
	Finished int
	// Fenced counts items skipped because their lease token no longer
	// matched: another relay owns the row now.
	Fenced int
}

// OutboxRecoverParams are the parameters of Outbox.OutboxRecover.
type OutboxRecoverParams struct {
	Limit int
}

// OutboxTypeStats describes one event type's rows.
type OutboxTypeStats struct {
	EventType string
	Pending   int64
	InProcess int64
	Failed    int64
	// OldestPendingAge is now() minus the creation time of the oldest
	// PENDING row, on the database clock; zero when none is pending.
	OldestPendingAge time.Duration
}

// CleanupParams are the parameters of the cleanup calls.
type CleanupParams struct {
	// OlderThan is the TTL: rows older than now() - OlderThan go.
	OlderThan time.Duration
	// Limit bounds one call's deletes so no statement holds locks long.
	Limit int
}

// DeadLetterMoveParams are the parameters of DeadLetters.DeadLetterMove.
type DeadLetterMoveParams struct {
	Limit int
}

// DeadLetter is a row of the dead-letter table.
type DeadLetter struct {
	ID        txbox.ID
	EventType string
	Key       string
	// Route and EventID are the outbox row's (OutboxRow.Route,
	// OutboxRow.EventID): a dead letter belongs to one route of its
	// event, and a retry sends it to that route only.
	Route   string
	EventID txbox.ID
	// Payload is nil in listings (DeadLetterList); DeadLetterGet reads it.
	Payload []byte
	// PayloadSize is the payload's size in bytes, read by every call.
	PayloadSize int
	Headers     map[string]string
	Attempts    int
	LastError   string
	CreatedAt   time.Time
	// FailedAt is when the row failed for good (the finish that made it
	// FAILED), not when the mover copied it here.
	FailedAt   time.Time
	Status     string // DeadLetterUnresolved or DeadLetterResolved
	ResolvedAt time.Time
}

// DeadLetterFilter selects dead letters. Zero fields match everything;
// set fields must all match.
type DeadLetterFilter struct {
	EventType string
	Status    string
	Key       string
	// ErrorContains matches a substring of the last error, ignoring case
	// on every dialect (as a search box does).
	ErrorContains string
	// FailedAfter and FailedBefore bound failed_at as a half-open
	// interval, the same on every dialect: FailedAfter is inclusive
	// (failed_at >= FailedAfter), FailedBefore exclusive (failed_at <
	// FailedBefore), so consecutive windows [a, b), [b, c) neither overlap
	// nor leave a gap. Whatever their zone, they are compared in UTC with
	// the stored times exactly: a bound finer than the stored precision
	// (microseconds; milliseconds on SQLite) selects the stored times on
	// its side of it (FilterBound). Both must lie within MinFilterTime and
	// MaxFilterTime (Validate).
	FailedAfter  time.Time
	FailedBefore time.Time
	// IDs, when not empty, keeps only these dead letters; at most
	// MaxFilterIDs.
	IDs []txbox.ID
	// Group, when set, keeps only the dead letters of this failure group
	// (a Fingerprint.Key, DeadLetterGroup.Fingerprint). A dead letter not
	// fingerprinted yet (DeadLetterFingerprint) belongs to no group.
	Group string
	// Route, when set, keeps only the dead letters of this fan-out route
	// (DeadLetter.Route, a route name: ValidRouteName). Empty selects
	// every route, and the dead letters of types with one route, whose
	// route is empty; those need no route filter to be told apart.
	Route string
}

// DeadLetterListParams are the parameters of DeadLetters.DeadLetterList.
type DeadLetterListParams struct {
	Filter DeadLetterFilter
	// After is the cursor: the last dead letter of the previous page. Nil
	// starts at the newest.
	After *DeadLetterCursor
	Limit int
}

// DeadLetterCursor positions a page of dead letters (failed_at desc, id
// desc).
type DeadLetterCursor struct {
	FailedAt time.Time
	ID       txbox.ID
}

// LeaseParams are the parameters of the lease calls.
type LeaseParams struct {
	Name   string
	Holder string
	TTL    time.Duration
}

// Waker is implemented by drivers that can wake relays when new events
// commit (PostgreSQL LISTEN/NOTIFY). It is optional: polling always stays
// on, so a missed wake-up costs at most the current polling delay.
type Waker interface {
	// OutboxListen blocks until ctx is done, calling wake with an event
	// type each time a transaction that published events of that type
	// commits. It reconnects on connection loss and returns ctx.Err() when
	// ctx ends.
	OutboxListen(ctx context.Context, wake func(eventType string)) error
}

// ReadyWaker is a Waker that also says when its listener is in place.
// The wake-ups of transactions that commit while it is not (before the
// first LISTEN, during a reconnect) are lost, and a type nobody
// configured would then wait for the next discovery round (up to
// minutes) to get a poller. The relay therefore looks for pending types
// and wakes every poller each time ready is called.
type ReadyWaker interface {
	Waker
	// OutboxListenReady is OutboxListen that calls ready each time the
	// listener starts listening: once it first listens, and again after
	// each reconnect. ready runs on the listener's goroutine and should
	// return quickly.
	OutboxListenReady(ctx context.Context, wake func(eventType string), ready func()) error
}

// OutboxLocker is implemented by drivers that offer the lock claim
// (docs/concepts.md, "Claim modes"): instead of marking rows IN_PROCESS
// with a lease (one write at the claim, one at the finish), the claim
// locks the rows in a transaction of its own and keeps it open while the
// caller sends them; the finish writes each row once and commits. A crash
// or a lost connection aborts the transaction and the rows are claimable
// again at once, with nothing to recover. PostgreSQL and MySQL/MariaDB
// implement it; SQLite, with its single writer, does not.
type OutboxLocker interface {
	// OutboxLock begins a transaction on a connection of its own, bounds
	// it to params.LeaseDuration on the session (a relay that stops
	// answering, as under SIGSTOP, loses the transaction and its locks
	// after about that long), and locks up to Limit due PENDING rows of
	// one type FOR UPDATE SKIP LOCKED, chosen exactly as OutboxClaim
	// chooses them (OrderedByKey and KeyRun included). The rows are not
	// changed: to every other session they stay PENDING, locked, so other
	// claims skip them and, on an ordered type, the rows behind them. It
	// returns nil and holds nothing when no row was due. The returned
	// batch holds one pooled connection until Finish or Rollback: size
	// the pool for one connection per batch in flight.
	OutboxLock(ctx context.Context, params *OutboxClaimParams) (LockedBatch, error)
}

// LockedBatch is a batch claimed by OutboxLocker.OutboxLock: rows locked
// in an open transaction. Exactly one of Finish or Rollback must be
// called; both release the connection.
type LockedBatch interface {
	// Rows are the locked rows in claim order. Their LeaseToken is zero.
	Rows() []*OutboxRow
	// Finish applies the outcomes in the transaction and commits it:
	// acked rows are deleted (DeleteAcked) or marked PROCESSED, retried
	// and released rows go back to PENDING with their due time, attempts
	// and last error as OutboxFinish sets them, and failed rows are moved
	// to the dead-letter table in the same transaction. Items whose id is
	// not a row of the batch change nothing and are counted in Fenced;
	// rows of the batch without an item stay as they were (PENDING). When
	// Finish returns an error the transaction did not commit: every row
	// is PENDING again as before the claim, and will be delivered again.
	Finish(ctx context.Context, params *OutboxFinishParams) (*OutboxFinishResult, error)
	// Rollback aborts the transaction: every row is as before the claim,
	// due when it was, no attempt counted. It is what an outage does.
	Rollback(ctx context.Context) error
}

// FenceLockedItems fences the items of a LockedBatch.Finish to the batch:
// it keeps those whose id is one of rows (with a zero LeaseToken, which a
// lock claim's rows carry), counts the others (they are fenced: not this
// batch's rows), and lists the ids of the kept items that fail, which the
// finish moves to the dead-letter table. Dialects share it so every lock
// finish fences the same way.
func FenceLockedItems(rows []*OutboxRow, params *OutboxFinishParams) (ours []OutboxFinishItem, fenced int, failed []txbox.ID) {
	if params == nil {
		return nil, 0, nil
	}
	in := make(map[txbox.ID]bool, len(rows))
	for _, r := range rows {
		in[r.ID] = true
	}
	for _, it := range params.Items {
		if !in[it.ID] {
			fenced++
			continue
		}
		it.LeaseToken = txbox.ID{}
		ours = append(ours, it)
		if it.Outcome == OutcomeFailed {
			failed = append(failed, it.ID)
		}
	}
	return ours, fenced, failed
}

// LockItems is the former name of [FenceLockedItems].
//
// Deprecated: use FenceLockedItems.
func LockItems(rows []*OutboxRow, params *OutboxFinishParams) (ours []OutboxFinishItem, fenced int, failed []txbox.ID) {
	return FenceLockedItems(rows, params)
}

// SchemaVersioner is implemented by drivers that record which migrations
// ran, so a readiness probe can tell a database that was not migrated (or
// was migrated by an older txbox) from a current one.
type SchemaVersioner interface {
	// SchemaVersion returns the highest applied migration version, 0
	// when none is. It is one round trip to the database.
	SchemaVersion(ctx context.Context) (int, error)
	// LatestSchemaVersion returns the version of the newest migration
	// this build embeds.
	LatestSchemaVersion() int
}
