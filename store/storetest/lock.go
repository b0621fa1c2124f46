package storetest

import (
	"context"
	"errors"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// ExerciseLock runs the lock claim suite (store.OutboxLocker) against the
// dialect behind h, whose drivers must implement it. Every subtest runs in
// parallel in its own namespace.
func ExerciseLock(t *testing.T, h Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env, store.OutboxLocker)
	}{
		{"LockHidesRowsFromEveryClaim", testLockExclusive},
		{"LockFinishOutcomes", testLockOutcomes},
		{"LockFinishDeletesAcked", testLockDeleteAcked},
		{"LockRetryDelayCountsFromFinish", testLockRetryFromFinish},
		{"LockRollbackCountsNoAttempt", testLockRollback},
		{"LockFinishFencesForeignRows", testLockFenced},
		{"LockBoundEndsAStalledBatch", testLockBound},
		{"LockOrderedByKey", testLockOrdered},
		{"LockConcurrentDisjoint", testLockConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, h)
			l, ok := e.d.(store.OutboxLocker)
			if !ok {
				t.Fatalf("%s driver does not implement store.OutboxLocker", e.d.Dialect())
			}
			tc.fn(t, e, l)
		})
	}
}

// lock runs a lock claim; it fails the test on error and ends the batch
// (rolls it back) when the test ends, if the test did not.
func (e *env) lock(l store.OutboxLocker, p store.OutboxClaimParams) store.LockedBatch {
	e.t.Helper()
	if p.LeaseDuration == 0 {
		p.LeaseDuration = longLease
	}
	// The claim's context ends when the claim returns, as the relay's
	// does: the transaction must outlive it.
	ctx, cancel := context.WithCancel(e.ctx)
	b, err := l.OutboxLock(ctx, &p)
	cancel()
	if err != nil {
		e.t.Fatalf("lock claim %+v: %v", p, err)
	}
	if b != nil {
		e.t.Cleanup(func() { _ = b.Rollback(e.ctx) })
	}
	return b
}

func lockedRows(b store.LockedBatch) []*store.OutboxRow {
	if b == nil {
		return nil
	}
	return b.Rows()
}

func (e *env) lockFinish(b store.LockedBatch, deleteAcked bool, items ...store.OutboxFinishItem) *store.OutboxFinishResult {
	e.t.Helper()
	res, err := b.Finish(e.ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: deleteAcked})
	if err != nil {
		e.t.Fatalf("lock finish: %v", err)
	}
	return res
}

// testLockExclusive: locked rows stay PENDING to everyone else, and
// neither a lock claim nor a lease claim can take them.
func testLockExclusive(t *testing.T, e *env, l store.OutboxLocker) {
	evs := events("locked", 6)
	e.publish(evs...)
	a := e.lock(l, store.OutboxClaimParams{EventType: "locked", Limit: 3})
	if got := lockedRows(a); len(got) != 3 || got[0].ID != evs[0].ID || got[2].ID != evs[2].ID {
		t.Fatalf("lock claim took %v, want the 3 oldest", ids(got))
	}
	for _, r := range a.Rows() {
		if r.LeaseToken != (txbox.ID{}) || r.Attempts != 0 || r.Headers["h"] != "v" {
			t.Fatalf("locked row %+v: want zero token, 0 attempts, headers kept", r)
		}
	}
	if s := e.stats("locked"); s.Pending != 6 || s.InProcess != 0 {
		t.Fatalf("stats while locked = %+v, want 6 pending (a lock writes nothing)", s)
	}
	leased := e.claim("locked", 10, longLease)
	b := e.lock(l, store.OutboxClaimParams{EventType: "locked", Limit: 10})
	if len(leased) != 3 || b != nil {
		t.Fatalf("lease claim took %v and a second lock claim %v; want the 3 unlocked rows, then nothing", ids(leased), ids(lockedRows(b)))
	}
	for _, r := range leased {
		if slices.Contains(ids(a.Rows()), r.ID) {
			t.Fatalf("lease claim took locked row %s", r.ID)
		}
	}
}

// testLockOutcomes: each outcome is written in the lock's transaction;
// failed rows are dead-lettered in it, with no FAILED row left behind.
func testLockOutcomes(t *testing.T, e *env, l store.OutboxLocker) {
	evs := events("outcomes", 4)
	e.publish(evs...)
	b := e.lock(l, store.OutboxClaimParams{EventType: "outcomes", Limit: 10})
	rows := b.Rows()
	if len(rows) != 4 {
		t.Fatalf("locked %d, want 4", len(rows))
	}
	res := e.lockFinish(b, false,
		item(rows[0], store.OutcomeAcked, 0, ""),
		item(rows[1], store.OutcomeRetry, 300*time.Millisecond, "try again"),
		item(rows[2], store.OutcomeFailed, 0, "poison"),
		item(rows[3], store.OutcomeReleased, 0, ""))
	if res.Finished != 4 || res.Fenced != 0 {
		t.Fatalf("finish = %+v, want 4 finished", res)
	}
	if s := e.stats("outcomes"); s.Failed != 0 || s.InProcess != 0 || s.Pending != 2 {
		t.Fatalf("stats = %+v, want 2 pending, none failed (dead-lettered at once)", s)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, rows[2].ID)
	if err != nil {
		t.Fatalf("dead letter of the failed row: %v", err)
	}
	if dl.Attempts != 1 || dl.LastError != "poison" || dl.Status != store.DeadLetterUnresolved {
		t.Fatalf("dead letter = %+v, want 1 attempt, last error poison, unresolved", dl)
	}
	if e.moveAll() != 0 {
		t.Fatal("the mover found a FAILED row the lock finish should have moved")
	}
	if got := e.h.OutboxLastError(t, e.d, rows[1].ID); got != "try again" {
		t.Fatalf("retried row's last error = %q", got)
	}
	// The released row is due at once with no attempt counted; the retry
	// after its delay with one.
	// Each claim is rolled back at once, as an outage would: on MySQL a
	// partial lock claim also holds the index record that ended its scan
	// (the not yet due retry) until it ends.
	back := map[txbox.ID]int{}
	eventually(t, "the retried row to be due", func() bool {
		b := e.lock(l, store.OutboxClaimParams{EventType: "outcomes", Limit: 10})
		for _, r := range lockedRows(b) {
			back[r.ID] = r.Attempts
		}
		if b != nil {
			if err := b.Rollback(e.ctx); err != nil {
				t.Fatalf("rollback: %v", err)
			}
		}
		return len(back) >= 2
	})
	if want := map[txbox.ID]int{rows[1].ID: 1, rows[3].ID: 0}; !maps.Equal(back, want) {
		t.Fatalf("rows came back with attempts %v; want retried=1, released=0: %v", back, want)
	}
}

// testLockRetryFromFinish: a retry's delay counts from the finish, not
// from the claim that began the transaction (PostgreSQL's now() is the
// transaction's start).
func testLockRetryFromFinish(t *testing.T, e *env, l store.OutboxLocker) {
	e.publish(event("later"))
	b := e.lock(l, store.OutboxClaimParams{EventType: "later", Limit: 10})
	time.Sleep(600 * time.Millisecond) // a send that takes longer than the retry delay
	finished := time.Now()
	e.lockFinish(b, false, item(b.Rows()[0], store.OutcomeRetry, 500*time.Millisecond, "later"))
	rows := e.claim("later", 10, longLease)
	if len(rows) != 0 && time.Since(finished) < 450*time.Millisecond {
		t.Fatalf("the retried row was due %s after its finish, before its 500ms delay", time.Since(finished))
	}
}

// testLockDeleteAcked: with DeleteAcked an acked row is gone; without it
// the row is PROCESSED and the cleanup's to delete.
func testLockDeleteAcked(t *testing.T, e *env, l store.OutboxLocker) {
	for _, del := range []bool{true, false} {
		ev := event("acked")
		e.publish(ev)
		b := e.lock(l, store.OutboxClaimParams{EventType: "acked", Limit: 10})
		e.lockFinish(b, del, item(b.Rows()[0], store.OutcomeAcked, 0, ""))
		n, err := e.d.OutboxCleanup(e.ctx, &store.CleanupParams{OlderThan: 0, Limit: 10})
		if err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		if want := map[bool]int{true: 0, false: 1}[del]; n != want {
			t.Fatalf("DeleteAcked=%v: cleanup deleted %d processed rows, want %d", del, n, want)
		}
	}
	if rows := e.claim("acked", 10, longLease); len(rows) != 0 {
		t.Fatalf("acked rows claimable again: %v", ids(rows))
	}
}

// testLockRollback: an outage's rollback puts every row back as it was:
// claimable at once, no attempt counted.
func testLockRollback(t *testing.T, e *env, l store.OutboxLocker) {
	evs := events("rolled", 3)
	e.publish(evs...)
	b := e.lock(l, store.OutboxClaimParams{EventType: "rolled", Limit: 10})
	if err := b.Rollback(e.ctx); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if _, err := b.Finish(e.ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{item(b.Rows()[0], store.OutcomeAcked, 0, "")}}); err == nil {
		t.Fatal("finish after rollback succeeded")
	}
	rows := e.claim("rolled", 10, longLease)
	if !slices.Equal(ids(rows), sortedIDs(evs)) {
		t.Fatalf("after rollback claimed %v, want all of %v", ids(rows), sortedIDs(evs))
	}
	for _, r := range rows {
		if r.Attempts != 0 {
			t.Fatalf("row %s has %d attempts after a rollback", r.ID, r.Attempts)
		}
	}
}

// testLockFenced: items that are not the batch's rows change nothing.
func testLockFenced(t *testing.T, e *env, l store.OutboxLocker) {
	mine, other := event("fence"), event("fence")
	e.publish(mine)
	b := e.lock(l, store.OutboxClaimParams{EventType: "fence", Limit: 10})
	e.publish(other)
	res := e.lockFinish(b, true, item(b.Rows()[0], store.OutcomeAcked, 0, ""),
		store.OutboxFinishItem{ID: other.ID, Outcome: store.OutcomeAcked})
	if res.Finished != 1 || res.Fenced != 1 {
		t.Fatalf("finish = %+v, want 1 finished, 1 fenced", res)
	}
	if rows := e.claim("fence", 10, longLease); len(rows) != 1 || rows[0].ID != other.ID {
		t.Fatalf("claimed %v, want the foreign row untouched", ids(rows))
	}
}

// testLockBound is the lock claim's stale finish: a batch whose holder
// stops answering loses its transaction after the bound (the lease
// duration), its rows go to the next claimer, and its late finish fails
// and changes nothing the new holder did.
func testLockBound(t *testing.T, e *env, l store.OutboxLocker) {
	ev := event("stalled")
	e.publish(ev)
	stale := e.lock(l, store.OutboxClaimParams{EventType: "stalled", Limit: 10, LeaseDuration: time.Second})
	var fresh []*store.OutboxRow
	eventually(t, "the stalled batch's session to end", func() bool {
		fresh = e.claim("stalled", 10, longLease)
		return len(fresh) == 1
	})
	e.finishAll(fresh, store.OutcomeRetry, time.Hour, "new holder")
	if _, err := stale.Finish(e.ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{item(stale.Rows()[0], store.OutcomeAcked, 0, "")}, DeleteAcked: true}); err == nil {
		t.Fatal("the stale batch's finish succeeded after its session ended")
	}
	if got := e.h.OutboxLastError(t, e.d, ev.ID); got != "new holder" {
		t.Fatalf("last error = %q after the stale finish, want the new holder's", got)
	}
	if s := e.stats("stalled"); s.Pending != 1 {
		t.Fatalf("stats = %+v, want the row pending (retry), not deleted by the stale finish", s)
	}
}

// testLockOrdered: a locked head hides the rest of its key from every
// ordered claim until it commits; a failed head parks its key in the
// dead-letter table.
func testLockOrdered(t *testing.T, e *env, l store.OutboxLocker) {
	const typ = "lockseq"
	a1, a2, a3 := keyed(typ, "A"), keyed(typ, "A"), keyed(typ, "A")
	b1, b2 := keyed(typ, "B"), keyed(typ, "B")
	n1 := event(typ)
	e.publish(a1, b1, a2, n1, b2, a3)
	ordered := store.OutboxClaimParams{EventType: typ, Limit: 10, OrderedByKey: true}
	first := e.lock(l, ordered)
	if got, want := ids(lockedRows(first)), sortedIDs([]*txbox.Event{a1, b1, n1}); !slices.Equal(got, want) {
		t.Fatalf("heads: locked %v, want %v", got, want)
	}
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("lease claim took %v while every head is locked", ids(rows))
	}
	if b := e.lock(l, ordered); b != nil {
		t.Fatalf("lock claim took %v while every head is locked", ids(b.Rows()))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range first.Rows() {
		byID[r.ID] = r
	}
	e.lockFinish(first, true, item(byID[a1.ID], store.OutcomeAcked, 0, ""), item(byID[b1.ID], store.OutcomeFailed, 0, "poison"),
		item(byID[n1.ID], store.OutcomeAcked, 0, ""))
	run := ordered
	run.KeyRun = 5
	second := e.lock(l, run)
	if got, want := ids(lockedRows(second)), sortedIDs([]*txbox.Event{a2, a3}); !slices.Equal(got, want) {
		t.Fatalf("after a1 acked and b1 dead-lettered: locked %v, want A's run %v (B parked)", got, want)
	}
	e.lockFinish(second, true, item(second.Rows()[0], store.OutcomeRetry, 0, "again"), store.OutboxFinishItem{ID: a3.ID, Outcome: store.OutcomeReleased})
	third := e.lock(l, run)
	if got, want := ids(lockedRows(third)), sortedIDs([]*txbox.Event{a2, a3}); !slices.Equal(got, want) {
		t.Fatalf("after a retry: locked %v, want %v in order", got, want)
	}
	if third.Rows()[0].Attempts != 1 {
		t.Fatalf("a2 attempts = %d, want 1", third.Rows()[0].Attempts)
	}
}

// testLockConcurrent: lock claims running at once take disjoint rows, and
// every row is delivered exactly once when each commits.
func testLockConcurrent(t *testing.T, e *env, l store.OutboxLocker) {
	const n, workers = 200, 4
	e.publish(events("conc", n)...)
	var mu sync.Mutex
	seen := map[txbox.ID]int{}
	var wg sync.WaitGroup
	var errs []error
	for range workers {
		wg.Go(func() {
			for {
				b, err := l.OutboxLock(e.ctx, &store.OutboxClaimParams{EventType: "conc", Limit: 15, LeaseDuration: longLease})
				if err != nil || b == nil {
					if err != nil {
						mu.Lock()
						errs = append(errs, err)
						mu.Unlock()
					}
					return
				}
				items := make([]store.OutboxFinishItem, 0, len(b.Rows()))
				mu.Lock()
				for _, r := range b.Rows() {
					seen[r.ID]++
					items = append(items, store.OutboxFinishItem{ID: r.ID, Outcome: store.OutcomeAcked})
				}
				mu.Unlock()
				if _, err := b.Finish(e.ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: true}); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					return
				}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatalf("concurrent lock claims: %v", err)
	}
	if len(seen) != n {
		t.Fatalf("delivered %d distinct rows, want %d", len(seen), n)
	}
	for id, c := range seen {
		if c != 1 {
			t.Fatalf("row %s locked %d times", id, c)
		}
	}
}
