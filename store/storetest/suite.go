package storetest

import (
	"bytes"
	"context"
	"slices"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// Short leases and delays keep the suite fast; boundaries are checked on
// both sides without sleeping "long enough": the early side is asserted
// only when the clock proves the boundary had not passed yet, and the late
// side is polled with a deadline.
const (
	shortLease = 300 * time.Millisecond
	longLease  = time.Hour
	deadline   = 20 * time.Second
)

// Exercise runs the outbox suite against the dialect behind h. Every
// subtest runs in parallel in its own namespace.
func Exercise(t *testing.T, h Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env)
	}{
		{"PublishCommitVisible", testPublishCommit},
		{"PublishRollbackNeverClaimable", testPublishRollback},
		{"PublishRequiresTransaction", testPublishNoTx},
		{"PublishHostileValuesBound", testHostileValues},
		{"BatchPublish", testBatchPublish},
		{"ClaimBatchSize", testClaimBatchSize},
		{"ClaimOrderDueThenID", testClaimOrder},
		{"ClaimOnlyItsType", testClaimType},
		{"ClaimBadParams", testClaimBadParams},
		{"NotBefore", testNotBefore},
		{"ClaimExclusivity", testClaimExclusivity},
		{"LeaseExpiryRecovery", testLeaseRecovery},
		{"FinishFencedByLeaseToken", testFencing},
		{"FinishAckedDelete", testAckedDelete},
		{"RetryScheduling", testRetry},
		{"Released", testReleased},
		{"DeadLetterMove", testDeadLetterMove},
		{"DeadLetterMoveConcurrent", testDeadLetterMoveConcurrent},
		{"DeadLetterRetrySameID", testDeadLetterRetry},
		{"DeadLetterRetryKeepsLastError", testDeadLetterRetryKeepsError},
		{"DeadLetterFailedAtIsFailureTime", testDeadLetterFailedAt},
		{"DeadLetterFailedWindowHalfOpen", testDeadLetterFailedWindow},
		{"FinishSanitisesText", testFinishSanitisesText},
		{"DeadLetterAdmin", testDeadLetterAdmin},
		{"DeadLetterCursor", testDeadLetterCursor},
		{"DeadLetterListReadsSizesNotPayloads", testDeadLetterListSizes},
		{"DeadLetterWalkHandsOverOnce", testDeadLetterWalkOnce},
		{"DeadLetterGroups", testDeadLetterGroups},
		{"DeadLetterActionsConcurrent", testDeadLetterActionsConcurrent},
		{"OutboxCleanupTTL", testOutboxCleanup},
		{"DeadLetterCleanupTTL", testDeadLetterCleanup},
		{"CleanupLease", testLease},
		{"AuditLog", testAudit},
		{"AuditClipsTextsRefusesBadParams", testAuditClip},
		{"AuditCleanupTTL", testAuditCleanup},
		{"MigrateConcurrently", testMigrateConcurrent},
		{"HostileIdentifiers", testHostileIdentifiers},
		{"OrderedByKey", testOrderedByKey},
		{"OrderedByKeyParkedUntilRetried", testOrderedParkedRetry},
		{"OrderedByKeyConcurrent", testOrderedConcurrent},
		{"OrderedByKeyConcurrentRuns", testOrderedConcurrentRuns},
		{"OrderedByKeyRuns", testOrderedRuns},
		{"OrderedByKeyHotKey", testOrderedHotKey},
		{"OrderedByKeyEveryKeyGetsItsTurn", testOrderedFairness},
		{"OrderedByKeyKeylessBehindParkedKey", testOrderedKeylessBehindParked},
		{"OrderedByKeyBadRun", testOrderedBadRun},
		{"StatsAndPendingTypes", testStats},
		{"Inspect", testInspect},
		{"ParkedKeys", testParkedKeys},
		{"Instances", testInstances},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, setup(t, h))
		})
	}
}

// env is one subtest's migrated driver on its own namespace.
type env struct {
	t   *testing.T
	h   Harness
	ns  string
	d   store.Driver
	ctx context.Context
}

func setup(t *testing.T, h Harness) *env {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	ns := h.NewNamespace(t)
	d, err := h.Open(t, ns, "")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatalf("migrate: %v", err)
	}
	return &env{t: t, h: h, ns: ns, d: d, ctx: ctx}
}

// event returns a fresh event of type typ with a unique id and payload.
func event(typ string) *txbox.Event {
	id := txbox.NewID()
	return &txbox.Event{
		ID:      id,
		Type:    typ,
		Payload: []byte(`{"id":"` + id.String() + `"}`),
		Headers: map[string]string{"h": "v"},
	}
}

func events(typ string, n int) []*txbox.Event {
	out := make([]*txbox.Event, n)
	for i := range out {
		out[i] = event(typ)
	}
	return out
}

// publish inserts evs in one committed transaction.
func (e *env) publish(evs ...*txbox.Event) {
	e.t.Helper()
	tx := e.h.Begin(e.t, e.d)
	if err := e.d.OutboxInsert(e.ctx, tx.Native(), &store.OutboxInsertParams{Events: evs, Notify: true}); err != nil {
		_ = tx.Rollback()
		e.t.Fatalf("insert: %v", err)
	}
	if err := tx.Commit(); err != nil {
		e.t.Fatalf("commit: %v", err)
	}
	// Keyed rows are claimed in order, below the dialect's horizon.
	wait := e.h.WaitHorizon
	if wait == nil {
		wait = e.h.WaitFence
	}
	if wait != nil && slices.ContainsFunc(evs, func(ev *txbox.Event) bool { return ev.Key != "" }) {
		wait(e.t, e.d)
	}
}

func (e *env) claimP(p store.OutboxClaimParams) []*store.OutboxRow {
	e.t.Helper()
	rows, err := e.d.OutboxClaim(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("claim %+v: %v", p, err)
	}
	return rows
}

func (e *env) claim(typ string, limit int, lease time.Duration) []*store.OutboxRow {
	e.t.Helper()
	return e.claimP(store.OutboxClaimParams{EventType: typ, Limit: limit, LeaseDuration: lease})
}

func (e *env) claimOrdered(typ string, limit int) []*store.OutboxRow {
	e.t.Helper()
	return e.claimP(store.OutboxClaimParams{EventType: typ, Limit: limit, LeaseDuration: longLease, OrderedByKey: true})
}

func (e *env) claimRun(typ string, limit, run int) []*store.OutboxRow {
	e.t.Helper()
	return e.claimP(store.OutboxClaimParams{EventType: typ, Limit: limit, LeaseDuration: longLease, OrderedByKey: true, KeyRun: run})
}

func (e *env) finish(deleteAcked bool, items ...store.OutboxFinishItem) *store.OutboxFinishResult {
	e.t.Helper()
	res, err := e.d.OutboxFinish(e.ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: deleteAcked})
	if err != nil {
		e.t.Fatalf("finish: %v", err)
	}
	return res
}

func item(r *store.OutboxRow, o store.Outcome, after time.Duration, msg string) store.OutboxFinishItem {
	return store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: o, RetryAfter: after, Error: msg}
}

func (e *env) finishAll(rows []*store.OutboxRow, o store.Outcome, after time.Duration, msg string) {
	e.t.Helper()
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = item(r, o, after, msg)
	}
	res := e.finish(false, items...)
	if res.Finished != len(rows) || res.Fenced != 0 {
		e.t.Fatalf("finish %d rows as %d: got finished=%d fenced=%d", len(rows), o, res.Finished, res.Fenced)
	}
}

func (e *env) stats(typ string) store.OutboxTypeStats {
	e.t.Helper()
	all, err := e.d.OutboxStats(e.ctx)
	if err != nil {
		e.t.Fatalf("stats: %v", err)
	}
	for _, s := range all {
		if s.EventType == typ {
			return *s
		}
	}
	return store.OutboxTypeStats{EventType: typ}
}

func (e *env) moveAll() int {
	e.t.Helper()
	n, err := e.d.DeadLetterMove(e.ctx, &store.DeadLetterMoveParams{Limit: 1000})
	if err != nil {
		e.t.Fatalf("dead-letter move: %v", err)
	}
	return n
}

// deadLetter fails one fresh event of typ with key and error msg and moves
// it to the dead-letter table.
func (e *env) deadLetter(typ, key, msg string) txbox.ID {
	e.t.Helper()
	ev := event(typ)
	ev.Key = key
	e.publish(ev)
	rows := e.claim(typ, 1, longLease)
	if len(rows) != 1 || rows[0].ID != ev.ID {
		e.t.Fatalf("claim of the event to dead-letter: got %v", ids(rows))
	}
	e.finishAll(rows, store.OutcomeFailed, 0, msg)
	if n := e.moveAll(); n != 1 {
		e.t.Fatalf("dead-letter move: moved %d, want 1", n)
	}
	return ev.ID
}

func ids(rows []*store.OutboxRow) []txbox.ID {
	out := make([]txbox.ID, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func sortedIDs(evs []*txbox.Event) []txbox.ID {
	out := make([]txbox.ID, len(evs))
	for i, ev := range evs {
		out[i] = ev.ID
	}
	slices.SortFunc(out, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// eventually polls cond every 10ms until it is true or the deadline passes.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	end := time.Now().Add(deadline)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("timed out after %s waiting for %s", deadline, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitUntil blocks until the wall clock passes at: the scheduled time the
// test is about (a not-before or retry time), not a guess at how long
// something takes.
func waitUntil(at time.Time) {
	if d := time.Until(at); d > 0 {
		time.Sleep(d)
	}
}
