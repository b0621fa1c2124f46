package storetest

import (
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func testOutboxCleanup(t *testing.T, e *env) {
	e.publish(events("kept", 5)...)
	rows := e.claim("kept", 5, longLease)
	ackedBefore := time.Now() // processed_at is not earlier than this
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	ackedAt := time.Now()                                                                                                                                       // nor later than this
	e.publish(events("kept", 2)...)                                                                                                                             // pending, never cleaned up
	cleanup := checkCleanupTTL(t, "cleanup", func(p *store.CleanupParams) (int, error) { return e.d.OutboxCleanup(e.ctx, p) }, ackedBefore, ackedAt, len(rows)) // 2, 2, 1
	if n := cleanup(0, 100); n != 0 {
		t.Fatalf("cleanup deleted %d rows that were not processed", n)
	}
	if s := e.stats("kept"); s.Pending != 2 {
		t.Fatalf("pending = %d, want 2", s.Pending)
	}
	if _, err := e.d.OutboxCleanup(e.ctx, &store.CleanupParams{OlderThan: time.Hour, Limit: 0}); err == nil {
		t.Error("cleanup with limit 0: no error")
	}
}

func testDeadLetterCleanup(t *testing.T, e *env) {
	var resolved []txbox.ID
	for range 3 {
		resolved = append(resolved, e.deadLetter("dl-clean", "", "x"))
	}
	open := e.deadLetter("dl-clean", "", "x")
	resolvedBefore := time.Now()
	if n, err := e.d.DeadLetterResolve(e.ctx, resolved); err != nil || n != 3 {
		t.Fatalf("resolve: %d %v", n, err)
	}
	resolvedAt := time.Now()
	checkCleanupTTL(t, "dead-letter cleanup", func(p *store.CleanupParams) (int, error) { return e.d.DeadLetterCleanup(e.ctx, p) }, resolvedBefore, resolvedAt, len(resolved)) // 2, 1
	if _, err := e.d.DeadLetterGet(e.ctx, open); err != nil {
		t.Fatalf("unresolved dead letter was cleaned up: %v", err)
	}
}

// checkCleanupTTL drives del, a cleanup, over rows that were finished
// (acked, resolved) between before and at: a 1h TTL deletes none of them,
// a 400ms TTL none before it has passed, and once it has, calls limited to
// 2 rows delete them all. It returns del as a function of the TTL and the
// limit that fails t on an error, for the caller's further checks.
func checkCleanupTTL(t *testing.T, what string, del func(*store.CleanupParams) (int, error), before, at time.Time, rows int) func(ttl time.Duration, limit int) int {
	t.Helper()
	cleanup := func(ttl time.Duration, limit int) int {
		t.Helper()
		n, err := del(&store.CleanupParams{OlderThan: ttl, Limit: limit})
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return n
	}
	if n := cleanup(time.Hour, 100); n != 0 {
		t.Fatalf("%s with a 1h TTL deleted %d fresh rows", what, n)
	}
	ttl := 400 * time.Millisecond
	left := rows
	if n := cleanup(ttl, 100); n != 0 {
		if time.Since(before) < ttl {
			t.Fatalf("%s deleted %d rows before the TTL", what, n)
		}
		left -= n // the probe ran late, when they were due
	}
	waitUntil(at.Add(ttl + 50*time.Millisecond))
	cleanupBounded(t, cleanup, ttl, left)
	return cleanup
}

// cleanupBounded calls cleanup(ttl, 2) until the left rows that are due
// are gone: each call deletes min(2, left), bounded by its limit. The early
// probe before it asserts only when the clock proves it ran before the
// TTL; when it ran late on a loaded machine, it deleted rows that were due
// and left is that much smaller.
func cleanupBounded(t *testing.T, cleanup func(ttl time.Duration, limit int) int, ttl time.Duration, left int) {
	t.Helper()
	for call := 1; left > 0; call++ {
		want := min(2, left)
		if n := cleanup(ttl, 2); n != want {
			t.Fatalf("bounded cleanup %d deleted %d, want %d", call, n, want)
		}
		left -= want
	}
}

func testLease(t *testing.T, e *env) {
	acquire := func(holder string, ttl time.Duration) bool {
		t.Helper()
		ok, err := e.d.LeaseAcquire(e.ctx, &store.LeaseParams{Name: "cleanup", Holder: holder, TTL: ttl})
		if err != nil {
			t.Fatalf("acquire: %v", err)
		}
		return ok
	}
	release := func(holder string) {
		t.Helper()
		if err := e.d.LeaseRelease(e.ctx, &store.LeaseParams{Name: "cleanup", Holder: holder}); err != nil {
			t.Fatalf("release: %v", err)
		}
	}
	if !acquire("a", time.Hour) {
		t.Fatal("a could not take a free lease")
	}
	if acquire("b", time.Hour) {
		t.Fatal("b took a lease a holds")
	}
	if !acquire("a", time.Hour) {
		t.Fatal("a could not renew its own lease")
	}
	if ok, _ := e.d.LeaseAcquire(e.ctx, &store.LeaseParams{Name: "other", Holder: "b", TTL: time.Hour}); !ok {
		t.Fatal("leases with different names interfere")
	}
	release("b") // not b's: no effect
	if acquire("b", time.Hour) {
		t.Fatal("b's release freed a's lease")
	}
	release("a")
	takenAt := time.Now() // before: the lease cannot expire earlier than this + TTL
	if !acquire("b", shortLease) {
		t.Fatal("b could not take a released lease")
	}
	if acquire("a", time.Hour) && time.Since(takenAt) < shortLease {
		t.Fatal("a took b's lease before it expired")
	}
	eventually(t, "b's lease to expire", func() bool { return acquire("a", time.Hour) })
	if time.Since(takenAt) < shortLease-50*time.Millisecond {
		t.Fatalf("lease taken over after %s, before its %s TTL", time.Since(takenAt), shortLease)
	}
	if _, err := e.d.LeaseAcquire(e.ctx, &store.LeaseParams{Name: "cleanup", Holder: "a", TTL: 0}); err == nil {
		t.Error("acquire with a zero TTL: no error")
	}
}
