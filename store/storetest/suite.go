package storetest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
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

// Exercise runs the conformance suite against the dialect behind h. Every
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
		{"OutboxCleanupTTL", testOutboxCleanup},
		{"DeadLetterCleanupTTL", testDeadLetterCleanup},
		{"CleanupLease", testLease},
		{"MigrateConcurrently", testMigrateConcurrent},
		{"HostileIdentifiers", testHostileIdentifiers},
		{"OrderedByKey", testOrderedByKey},
		{"OrderedByKeyParkedUntilRetried", testOrderedParkedRetry},
		{"OrderedByKeyConcurrent", testOrderedConcurrent},
		{"StatsAndPendingTypes", testStats},
	}
	// Optional capabilities get their subtests only where implemented.
	probe := setupProbe(t, h)
	if _, ok := probe.(store.OutboxFinishClaimer); ok {
		tests = append(tests, struct {
			name string
			fn   func(*testing.T, *env)
		}{"FinishAndClaim", testFinishAndClaim})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.fn(t, setup(t, h))
		})
	}
}

// setupProbe opens an unmigrated driver only to see which optional
// interfaces the dialect implements.
func setupProbe(t *testing.T, h Harness) store.Driver {
	t.Helper()
	d, err := h.Open(t, h.NewNamespace(t), "")
	if err != nil {
		t.Fatalf("open: %v", err)
	}
	return d
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

func testPublishCommit(t *testing.T, e *env) {
	ev := event("order-created")
	ev.Key = "order-42"
	ev.Headers = map[string]string{"a": "1", "b": "two"}
	before := time.Now()
	tx := e.h.Begin(t, e.d)
	if err := e.d.OutboxInsert(e.ctx, tx.Native(), &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if !e.h.SerialWriter {
		// Not visible to another session before commit.
		if rows := e.claim(ev.Type, 10, longLease); len(rows) != 0 {
			t.Fatalf("claimed %d uncommitted rows", len(rows))
		}
	}
	if err := tx.Commit(); err != nil {
		t.Fatalf("commit: %v", err)
	}
	rows := e.claim(ev.Type, 10, longLease)
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows after commit, want 1", len(rows))
	}
	r := rows[0]
	if r.ID != ev.ID || r.EventType != ev.Type || r.Key != ev.Key || !bytes.Equal(r.Payload, ev.Payload) || r.Attempts != 0 {
		t.Fatalf("claimed row %+v does not match published event %+v", r, ev)
	}
	if len(r.Headers) != 2 || r.Headers["a"] != "1" || r.Headers["b"] != "two" {
		t.Fatalf("headers = %v, want a=1 b=two", r.Headers)
	}
	if r.LeaseToken == (txbox.ID{}) {
		t.Fatal("claimed row has no lease token")
	}
	// The database clock set created_at; allow generous skew on one host.
	if r.CreatedAt.Before(before.Add(-time.Minute)) || r.CreatedAt.After(time.Now().Add(time.Minute)) {
		t.Fatalf("created_at %v is not near now %v", r.CreatedAt, before)
	}
	if rows := e.claim(ev.Type, 10, longLease); len(rows) != 0 {
		t.Fatalf("claimed the same row twice")
	}
}

func testPublishRollback(t *testing.T, e *env) {
	ev := event("rolled-back")
	tx := e.h.Begin(t, e.d)
	if err := e.d.OutboxInsert(e.ctx, tx.Native(), &store.OutboxInsertParams{Events: []*txbox.Event{ev, event("rolled-back")}, Notify: true}); err != nil {
		t.Fatalf("insert: %v", err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatalf("rollback: %v", err)
	}
	if rows := e.claim(ev.Type, 10, longLease); len(rows) != 0 {
		t.Fatalf("claimed %d rolled-back rows", len(rows))
	}
	if s := e.stats(ev.Type); s.Pending != 0 {
		t.Fatalf("stats show %d pending rolled-back rows", s.Pending)
	}
	// A later commit in the same namespace is unaffected.
	ok := event("rolled-back")
	e.publish(ok)
	if rows := e.claim(ev.Type, 10, longLease); len(rows) != 1 || rows[0].ID != ok.ID {
		t.Fatalf("after rollback then commit claimed %v, want [%s]", ids(rows), ok.ID)
	}
}

type notATx struct{}

func testPublishNoTx(t *testing.T, e *env) {
	p := &store.OutboxInsertParams{Events: []*txbox.Event{event("no-tx")}}
	for name, tx := range map[string]any{"nil": nil, "int": 42, "struct": notATx{}} {
		if err := e.d.OutboxInsert(e.ctx, tx, p); !errors.Is(err, txbox.ErrNoTransaction) {
			t.Errorf("insert with %s tx: error %v, want one matching txbox.ErrNoTransaction", name, err)
		}
	}
	if rows := e.claim("no-tx", 10, longLease); len(rows) != 0 {
		t.Fatalf("an insert without a transaction left %d rows", len(rows))
	}
}

var hostile = []string{
	`x"; DROP TABLE t;--`,
	"x`; DROP TABLE t;--",
	`x'); DELETE FROM txbox_outbox;--`,
	strings.Repeat("a", 300),
	"ünïcødé_名前",
}

func testHostileValues(t *testing.T, e *env) {
	before := e.h.Tables(t, e.ns)
	var evs []*txbox.Event
	for _, s := range hostile {
		ev := event("hostile")
		ev.Key = s
		ev.Payload = []byte(s + "\x00\xff")
		ev.Headers = map[string]string{s: s, "q": `"\'`}
		evs = append(evs, ev)
	}
	e.publish(evs...)
	rows := e.claim("hostile", 100, longLease)
	if len(rows) != len(evs) {
		t.Fatalf("claimed %d rows, want %d", len(rows), len(evs))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	for _, ev := range evs {
		r := byID[ev.ID]
		if r == nil || r.Key != ev.Key || !bytes.Equal(r.Payload, ev.Payload) || r.Headers[ev.Key] != ev.Key || r.Headers["q"] != `"\'` {
			t.Fatalf("hostile values were not stored verbatim: got %+v want %+v", r, ev)
		}
	}
	if _, err := e.d.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: hostile[0], Limit: 1, LeaseDuration: longLease}); err == nil {
		t.Fatal("claim with a hostile event type succeeded")
	}
	if after := e.h.Tables(t, e.ns); !slices.Equal(before, after) {
		t.Fatalf("tables changed: before %v after %v", before, after)
	}
}

func testBatchPublish(t *testing.T, e *env) {
	evs := events("batch", 250)
	evs[7].Key = "k"
	evs[9].NotBefore = time.Now().Add(time.Hour)
	e.publish(evs...)
	rows := e.claim("batch", 1000, longLease)
	if len(rows) != 249 {
		t.Fatalf("claimed %d rows, want 249 (one is not before an hour)", len(rows))
	}
	want := sortedIDs(append(slices.Clone(evs[:9]), evs[10:]...))
	if got := ids(rows); !slices.Equal(got, want) {
		t.Fatalf("batch rows are not in id order (one statement, one due time)")
	}
	if s := e.stats("batch"); s.Pending != 1 || s.InProcess != 249 {
		t.Fatalf("stats = %+v, want pending 1, in process 249", s)
	}
}

func testClaimBatchSize(t *testing.T, e *env) {
	e.publish(events("sized", 5)...)
	for i, want := range []int{2, 2, 1, 0} {
		if rows := e.claim("sized", 2, longLease); len(rows) != want {
			t.Fatalf("claim %d returned %d rows, want %d", i, len(rows), want)
		}
	}
}

func testClaimOrder(t *testing.T, e *env) {
	// Ids ascending a < b < c; due times descending for a and b, so the
	// claim must order by due time first, id second.
	a, b, c := event("ordered"), event("ordered"), event("ordered")
	now := time.Now()
	a.NotBefore = now.Add(600 * time.Millisecond)
	b.NotBefore = now.Add(300 * time.Millisecond)
	d1, d2 := event("ordered"), event("ordered") // due now, same statement
	e.publish(a, b, c, d1, d2)
	waitUntil(a.NotBefore.Add(50 * time.Millisecond))
	rows := e.claim("ordered", 10, longLease)
	want := append(sortedIDs([]*txbox.Event{c, d1, d2}), b.ID, a.ID)
	if got := ids(rows); !slices.Equal(got, want) {
		t.Fatalf("claim order = %v, want %v (due_at, then id)", got, want)
	}
}

func testClaimType(t *testing.T, e *env) {
	e.publish(event("type-a"), event("type-b"), event("type-b"))
	if rows := e.claim("type-a", 10, longLease); len(rows) != 1 || rows[0].EventType != "type-a" {
		t.Fatalf("claim type-a got %d rows", len(rows))
	}
	if rows := e.claim("type-b", 10, longLease); len(rows) != 2 {
		t.Fatalf("claim type-b got %d rows, want 2", len(rows))
	}
	if rows := e.claim("type-c", 10, longLease); len(rows) != 0 {
		t.Fatalf("claim type-c got %d rows, want 0", len(rows))
	}
}

func testClaimBadParams(t *testing.T, e *env) {
	e.publish(event("bad"))
	for _, p := range []store.OutboxClaimParams{
		{EventType: "bad", Limit: 0, LeaseDuration: longLease},
		{EventType: "bad", Limit: -1, LeaseDuration: longLease},
		{EventType: "bad", Limit: 1, LeaseDuration: 0},
		{EventType: "", Limit: 1, LeaseDuration: longLease},
	} {
		rows, err := e.d.OutboxClaim(e.ctx, &p)
		var badType *txbox.InvalidEventTypeError
		if !errors.Is(err, store.ErrInvalidParams) && !(p.EventType == "" && errors.As(err, &badType)) {
			t.Errorf("claim %+v: error %v (claimed %d), want one matching store.ErrInvalidParams", p, err, len(rows))
		}
	}
	bad := []struct {
		name string
		call func() error
	}{
		{"finish with an unknown outcome", func() error {
			_, err := e.d.OutboxFinish(e.ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{{ID: txbox.NewID(), Outcome: store.Outcome(99)}}})
			return err
		}},
		{"recover with limit 0", func() error {
			_, err := e.d.OutboxRecover(e.ctx, &store.OutboxRecoverParams{Limit: 0})
			return err
		}},
		{"cleanup with limit 0", func() error {
			_, err := e.d.OutboxCleanup(e.ctx, &store.CleanupParams{OlderThan: time.Hour, Limit: 0})
			return err
		}},
		{"dead-letter move with limit 0", func() error {
			_, err := e.d.DeadLetterMove(e.ctx, &store.DeadLetterMoveParams{Limit: 0})
			return err
		}},
		{"dead-letter list with limit 0", func() error {
			_, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Limit: 0})
			return err
		}},
		{"dead-letter count with an unknown status", func() error {
			_, err := e.d.DeadLetterCount(e.ctx, &store.DeadLetterFilter{Status: "BOGUS"})
			return err
		}},
		{"lease with a zero TTL", func() error {
			_, err := e.d.LeaseAcquire(e.ctx, &store.LeaseParams{Name: "n", Holder: "h"})
			return err
		}},
	}
	for _, c := range bad {
		if err := c.call(); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("%s: error %v, want one matching store.ErrInvalidParams", c.name, err)
		}
	}
	if rows := e.claim("bad", 10, longLease); len(rows) != 1 {
		t.Fatalf("a rejected claim changed rows: %d left", len(rows))
	}
}

func testNotBefore(t *testing.T, e *env) {
	later, soon, now := event("delayed"), event("delayed"), event("delayed")
	later.NotBefore = time.Now().Add(time.Hour)
	soon.NotBefore = time.Now().Add(400 * time.Millisecond)
	e.publish(later, soon, now)
	// A single-event publish may take another statement path: cover it.
	single := event("delayed")
	single.NotBefore = time.Now().Add(time.Hour)
	e.publish(single)
	rows := e.claim("delayed", 10, longLease)
	if len(rows) != 1 || rows[0].ID != now.ID {
		if time.Now().Before(soon.NotBefore) {
			t.Fatalf("before the not-before time claimed %v, want only %s", ids(rows), now.ID)
		}
	}
	var got []*store.OutboxRow
	eventually(t, "the delayed event to become due", func() bool {
		got = append(got, e.claim("delayed", 10, longLease)...)
		return slices.ContainsFunc(got, func(r *store.OutboxRow) bool { return r.ID == soon.ID })
	})
	// The database clock decides; allow 50ms of skew against ours.
	if time.Now().Before(soon.NotBefore.Add(-50 * time.Millisecond)) {
		t.Fatalf("delayed event claimed before its not-before time")
	}
	if slices.ContainsFunc(got, func(r *store.OutboxRow) bool { return r.ID == later.ID || r.ID == single.ID }) {
		t.Fatal("event not before an hour was claimed")
	}
	if s := e.stats("delayed"); s.Pending != 2 {
		t.Fatalf("pending = %d, want 2 (the hour-delayed events)", s.Pending)
	}
}

func testClaimExclusivity(t *testing.T, e *env) {
	const total, claimers = 400, 8
	evs := events("contended", total)
	e.publish(evs...)
	var (
		mu   sync.Mutex
		seen = map[txbox.ID]int{}
		wg   sync.WaitGroup
		errs = make(chan error, claimers)
	)
	start := make(chan struct{})
	for range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			empty := 0
			for empty < 3 {
				rows, err := e.d.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: "contended", Limit: 7, LeaseDuration: longLease})
				if err != nil {
					errs <- err
					return
				}
				if len(rows) == 0 {
					empty++
					continue
				}
				mu.Lock()
				for _, r := range rows {
					seen[r.ID]++
				}
				mu.Unlock()
				items := make([]store.OutboxFinishItem, len(rows))
				for i, r := range rows {
					items[i] = item(r, store.OutcomeAcked, 0, "")
				}
				res, err := e.d.OutboxFinish(e.ctx, &store.OutboxFinishParams{Items: items})
				if err != nil {
					errs <- err
					return
				}
				if res.Finished != len(rows) {
					errs <- fmt.Errorf("finish of an exclusive batch: finished %d of %d", res.Finished, len(rows))
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for id, n := range seen {
		if n != 1 {
			t.Fatalf("row %s claimed %d times", id, n)
		}
	}
	if len(seen) != total {
		// Claimers stop after empty polls; a slow one may leave rows, which
		// must then still be claimable, never lost.
		rest := e.claim("contended", total, longLease)
		for _, r := range rest {
			if seen[r.ID] != 0 {
				t.Fatalf("row %s claimed again after it was acked", r.ID)
			}
			seen[r.ID]++
		}
	}
	if len(seen) != total {
		t.Fatalf("claimed %d distinct rows, want %d", len(seen), total)
	}
}

func testLeaseRecovery(t *testing.T, e *env) {
	ev := event("leased")
	e.publish(ev)
	claimedAt := time.Now()
	rows := e.claim("leased", 1, shortLease)
	if len(rows) != 1 {
		t.Fatalf("claimed %d rows, want 1", len(rows))
	}
	old := rows[0]
	n, err := e.d.OutboxRecover(e.ctx, &store.OutboxRecoverParams{Limit: 10})
	if err != nil {
		t.Fatalf("recover: %v", err)
	}
	if n != 0 && time.Since(claimedAt) < shortLease {
		t.Fatalf("recovered %d rows before the lease expired", n)
	}
	if n == 0 {
		if rows := e.claim("leased", 1, shortLease); len(rows) != 0 && time.Since(claimedAt) < shortLease {
			t.Fatal("row claimed by a second relay while its lease was live")
		}
		eventually(t, "the expired lease to be recovered", func() bool {
			n, err := e.d.OutboxRecover(e.ctx, &store.OutboxRecoverParams{Limit: 10})
			if err != nil {
				t.Fatalf("recover: %v", err)
			}
			return n == 1
		})
	}
	if time.Since(claimedAt) < shortLease-50*time.Millisecond {
		t.Fatalf("recovered after %s, before the %s lease expired", time.Since(claimedAt), shortLease)
	}
	rows = e.claim("leased", 1, longLease)
	if len(rows) != 1 || rows[0].ID != ev.ID {
		t.Fatalf("recovered row not claimable: got %v", ids(rows))
	}
	fresh := rows[0]
	if fresh.Attempts != 0 {
		t.Fatalf("recovery counted an attempt: attempts = %d", fresh.Attempts)
	}
	if fresh.LeaseToken == old.LeaseToken {
		t.Fatal("a new claim reused the old lease token")
	}
	// The crashed relay's late finish changes nothing.
	if res := e.finish(false, item(old, store.OutcomeAcked, 0, "")); res.Finished != 0 || res.Fenced != 1 {
		t.Fatalf("stale finish: finished=%d fenced=%d, want 0/1", res.Finished, res.Fenced)
	}
	if s := e.stats("leased"); s.InProcess != 1 {
		t.Fatalf("stale finish changed the row: %+v", s)
	}
	if res := e.finish(false, item(fresh, store.OutcomeAcked, 0, "")); res.Finished != 1 {
		t.Fatalf("owner's finish: finished=%d, want 1", res.Finished)
	}
	if n, _ := e.d.OutboxRecover(e.ctx, &store.OutboxRecoverParams{Limit: 10}); n != 0 {
		t.Fatalf("recover touched a finished row: %d", n)
	}
}

func testFencing(t *testing.T, e *env) {
	evs := events("fenced", 3)
	e.publish(evs...)
	rows := e.claim("fenced", 3, longLease)
	if len(rows) != 3 {
		t.Fatalf("claimed %d, want 3", len(rows))
	}
	wrong := *rows[0]
	wrong.LeaseToken = txbox.NewID()
	res := e.finish(false, item(&wrong, store.OutcomeAcked, 0, ""), item(rows[1], store.OutcomeAcked, 0, ""))
	if res.Finished != 1 || res.Fenced != 1 {
		t.Fatalf("finish with one wrong token: finished=%d fenced=%d, want 1/1", res.Finished, res.Fenced)
	}
	if s := e.stats("fenced"); s.InProcess != 2 {
		t.Fatalf("in process = %d, want 2 (the fenced row untouched)", s.InProcess)
	}
	// Finishing an already finished row is fenced too.
	if res := e.finish(false, item(rows[1], store.OutcomeRetry, 0, "late")); res.Finished != 0 || res.Fenced != 1 {
		t.Fatalf("second finish: finished=%d fenced=%d, want 0/1", res.Finished, res.Fenced)
	}
	// An unknown id is fenced, not an error.
	ghost := store.OutboxRow{ID: txbox.NewID(), LeaseToken: rows[2].LeaseToken}
	if res := e.finish(false, item(&ghost, store.OutcomeAcked, 0, ""), item(rows[2], store.OutcomeAcked, 0, "")); res.Finished != 1 || res.Fenced != 1 {
		t.Fatalf("finish with an unknown id: finished=%d fenced=%d, want 1/1", res.Finished, res.Fenced)
	}
	if res := e.finish(false, item(rows[0], store.OutcomeAcked, 0, "")); res.Finished != 1 {
		t.Fatal("the right token did not finish the row")
	}
}

func testAckedDelete(t *testing.T, e *env) {
	e.publish(events("acked", 4)...)
	rows := e.claim("acked", 4, longLease)
	if len(rows) != 4 {
		t.Fatalf("claimed %d, want 4", len(rows))
	}
	res := e.finish(true, item(rows[0], store.OutcomeAcked, 0, ""), item(rows[1], store.OutcomeAcked, 0, ""),
		item(rows[2], store.OutcomeRetry, 0, "x"), item(rows[3], store.OutcomeReleased, 0, ""))
	if res.Finished != 4 {
		t.Fatalf("finished %d, want 4", res.Finished)
	}
	// Deleted rows leave nothing for cleanup; the other two are pending.
	n, err := e.d.OutboxCleanup(e.ctx, &store.CleanupParams{OlderThan: 0, Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("cleanup found %d processed rows after delete-on-ack", n)
	}
	if rows := e.claim("acked", 10, longLease); len(rows) != 2 {
		t.Fatalf("claimed %d, want the 2 not acked", len(rows))
	}
}

func testRetry(t *testing.T, e *env) {
	far, near := event("retried"), event("retried")
	e.publish(far, near)
	rows := e.claim("retried", 2, longLease)
	if len(rows) != 2 {
		t.Fatalf("claimed %d, want 2", len(rows))
	}
	byID := map[txbox.ID]*store.OutboxRow{rows[0].ID: rows[0], rows[1].ID: rows[1]}
	finishedAt := time.Now()
	e.finish(false, item(byID[far.ID], store.OutcomeRetry, time.Hour, "far"), item(byID[near.ID], store.OutcomeRetry, 400*time.Millisecond, "e1"))
	if rows := e.claim("retried", 10, longLease); len(rows) != 0 && time.Since(finishedAt) < 400*time.Millisecond {
		t.Fatalf("a retried row was claimable before its retry time: %v", ids(rows))
	}
	if s := e.stats("retried"); s.Pending+s.InProcess != 2 {
		t.Fatalf("stats = %+v, want both rows pending", s)
	}
	var got *store.OutboxRow
	eventually(t, "the retry to become due", func() bool {
		if rows := e.claim("retried", 10, longLease); len(rows) > 0 {
			if len(rows) != 1 || rows[0].ID != near.ID {
				t.Fatalf("claimed %v, want only %s", ids(rows), near.ID)
			}
			got = rows[0]
		}
		return got != nil
	})
	if time.Since(finishedAt) < 350*time.Millisecond {
		t.Fatalf("retry claimed after %s, before its 400ms delay", time.Since(finishedAt))
	}
	if got.Attempts != 1 {
		t.Fatalf("attempts after one retry = %d, want 1", got.Attempts)
	}
	e.finishAll([]*store.OutboxRow{got}, store.OutcomeFailed, 0, "e2")
	if s := e.stats("retried"); s.Failed != 1 {
		t.Fatalf("failed = %d, want 1", s.Failed)
	}
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, near.ID)
	if err != nil {
		t.Fatal(err)
	}
	if dl.Attempts != 2 || dl.LastError != "e2" {
		t.Fatalf("dead letter attempts=%d last error=%q, want 2 and e2", dl.Attempts, dl.LastError)
	}
}

func testReleased(t *testing.T, e *env) {
	now, later := event("released"), event("released")
	e.publish(now, later)
	rows := e.claim("released", 2, longLease)
	byID := map[txbox.ID]*store.OutboxRow{rows[0].ID: rows[0], rows[1].ID: rows[1]}
	e.finish(false, item(byID[now.ID], store.OutcomeReleased, 0, ""), item(byID[later.ID], store.OutcomeReleased, time.Hour, ""))
	rows = e.claim("released", 10, longLease)
	if len(rows) != 1 || rows[0].ID != now.ID {
		t.Fatalf("after release claimed %v, want [%s]", ids(rows), now.ID)
	}
	if rows[0].Attempts != 0 {
		t.Fatalf("release counted an attempt: %d", rows[0].Attempts)
	}
}

func testDeadLetterMove(t *testing.T, e *env) {
	evs := events("poison", 3)
	evs[0].Key = "k0"
	evs[0].Headers = map[string]string{"x": "y"}
	e.publish(evs...)
	rows := e.claim("poison", 3, longLease)
	e.finishAll(rows, store.OutcomeFailed, 0, "boom")
	if s := e.stats("poison"); s.Failed != 3 {
		t.Fatalf("failed = %d, want 3", s.Failed)
	}
	if rows := e.claim("poison", 10, longLease); len(rows) != 0 {
		t.Fatal("FAILED rows are claimable")
	}
	n, err := e.d.DeadLetterMove(e.ctx, &store.DeadLetterMoveParams{Limit: 2})
	if err != nil || n != 2 {
		t.Fatalf("move limit 2: n=%d err=%v", n, err)
	}
	if s := e.stats("poison"); s.Failed != 1 {
		t.Fatalf("after moving 2, failed = %d, want 1", s.Failed)
	}
	if c, _ := e.d.DeadLetterCount(e.ctx, nil); c != 2 {
		t.Fatalf("dead letters = %d, want 2", c)
	}
	if n := e.moveAll(); n != 1 {
		t.Fatalf("second move: %d, want 1", n)
	}
	if n := e.moveAll(); n != 0 {
		t.Fatalf("third move: %d, want 0", n)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, evs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if dl.EventType != "poison" || dl.Key != "k0" || !bytes.Equal(dl.Payload, evs[0].Payload) ||
		dl.Headers["x"] != "y" || dl.Attempts != 1 || dl.LastError != "boom" ||
		dl.Status != store.DeadLetterUnresolved || dl.CreatedAt.IsZero() || dl.FailedAt.Before(dl.CreatedAt) ||
		!dl.ResolvedAt.IsZero() {
		t.Fatalf("dead letter %+v does not keep the row", dl)
	}
	if s := e.stats("poison"); s.Failed+s.Pending+s.InProcess != 0 {
		t.Fatalf("moved rows still in the outbox: %+v", s)
	}
}

func testDeadLetterRetry(t *testing.T, e *env) {
	id := e.deadLetter("again", "", "first")
	n, err := e.d.DeadLetterRetry(e.ctx, []txbox.ID{id, txbox.NewID()})
	if err != nil || n != 1 {
		t.Fatalf("retry: n=%d err=%v, want 1", n, err)
	}
	if _, err := e.d.DeadLetterGet(e.ctx, id); !errors.Is(err, txbox.ErrNotFound) {
		t.Fatalf("get after retry: %v, want ErrNotFound", err)
	}
	rows := e.claim("again", 10, longLease)
	if len(rows) != 1 || rows[0].ID != id || rows[0].Attempts != 0 {
		t.Fatalf("after retry claimed %+v, want %s with attempts 0", rows, id)
	}
	if n, _ := e.d.DeadLetterRetry(e.ctx, []txbox.ID{id}); n != 0 {
		t.Fatalf("second retry moved %d", n)
	}
}

func testDeadLetterAdmin(t *testing.T, e *env) {
	a1 := e.deadLetter("dl-a", "k1", "timeout talking to broker")
	a2 := e.deadLetter("dl-a", "k2", "schema mismatch")
	b1 := e.deadLetter("dl-b", "k1", "timeout again")
	count := func(f store.DeadLetterFilter) int64 {
		t.Helper()
		n, err := e.d.DeadLetterCount(e.ctx, &f)
		if err != nil {
			t.Fatalf("count %+v: %v", f, err)
		}
		return n
	}
	list := func(f store.DeadLetterFilter) []txbox.ID {
		t.Helper()
		dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Filter: f, Limit: 100})
		if err != nil {
			t.Fatalf("list %+v: %v", f, err)
		}
		out := make([]txbox.ID, len(dls))
		for i, dl := range dls {
			out[i] = dl.ID
		}
		return out
	}
	future := time.Now().Add(time.Hour)
	past := time.Now().Add(-time.Hour)
	for _, c := range []struct {
		f    store.DeadLetterFilter
		want []txbox.ID
	}{
		{store.DeadLetterFilter{}, []txbox.ID{b1, a2, a1}},
		{store.DeadLetterFilter{EventType: "dl-a"}, []txbox.ID{a2, a1}},
		{store.DeadLetterFilter{Key: "k1"}, []txbox.ID{b1, a1}},
		{store.DeadLetterFilter{EventType: "dl-a", Key: "k1"}, []txbox.ID{a1}},
		{store.DeadLetterFilter{ErrorContains: "timeout"}, []txbox.ID{b1, a1}},
		{store.DeadLetterFilter{ErrorContains: "%"}, nil},
		{store.DeadLetterFilter{Status: store.DeadLetterUnresolved}, []txbox.ID{b1, a2, a1}},
		{store.DeadLetterFilter{Status: store.DeadLetterResolved}, nil},
		{store.DeadLetterFilter{FailedAfter: future}, nil},
		{store.DeadLetterFilter{FailedAfter: past, FailedBefore: future}, []txbox.ID{b1, a2, a1}},
		{store.DeadLetterFilter{FailedBefore: past}, nil},
	} {
		if got := list(c.f); !slices.Equal(got, c.want) {
			t.Errorf("list %+v = %v, want %v", c.f, got, c.want)
		}
		if got := count(c.f); got != int64(len(c.want)) {
			t.Errorf("count %+v = %d, want %d", c.f, got, len(c.want))
		}
	}
	if n, err := e.d.DeadLetterResolve(e.ctx, []txbox.ID{a1, txbox.NewID()}); err != nil || n != 1 {
		t.Fatalf("resolve: n=%d err=%v, want 1", n, err)
	}
	if n, _ := e.d.DeadLetterResolve(e.ctx, []txbox.ID{a1}); n != 0 {
		t.Fatalf("resolving twice changed %d", n)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, a1)
	if err != nil || dl.Status != store.DeadLetterResolved || dl.ResolvedAt.IsZero() {
		t.Fatalf("resolved dead letter = %+v, %v", dl, err)
	}
	if got := list(store.DeadLetterFilter{Status: store.DeadLetterResolved}); !slices.Equal(got, []txbox.ID{a1}) {
		t.Fatalf("resolved list = %v, want [%s]", got, a1)
	}
	if got := count(store.DeadLetterFilter{Status: store.DeadLetterUnresolved}); got != 2 {
		t.Fatalf("unresolved count = %d, want 2", got)
	}
	if _, err := e.d.DeadLetterCount(e.ctx, &store.DeadLetterFilter{Status: "BOGUS"}); err == nil {
		t.Error("count with an unknown status: no error")
	}
	if n, err := e.d.DeadLetterDelete(e.ctx, []txbox.ID{a2, b1}); err != nil || n != 2 {
		t.Fatalf("delete: n=%d err=%v, want 2", n, err)
	}
	if _, err := e.d.DeadLetterGet(e.ctx, a2); !errors.Is(err, txbox.ErrNotFound) {
		t.Fatalf("get deleted: %v, want ErrNotFound", err)
	}
	if got := count(store.DeadLetterFilter{}); got != 1 {
		t.Fatalf("count after delete = %d, want 1", got)
	}
}

func testDeadLetterCursor(t *testing.T, e *env) {
	evs := events("paged", 7)
	e.publish(evs...)
	e.finishAll(e.claim("paged", 7, longLease), store.OutcomeFailed, 0, "x")
	if n := e.moveAll(); n != 7 {
		t.Fatalf("moved %d, want 7", n)
	}
	var (
		pages [][]txbox.ID
		all   []*store.DeadLetter
		after *store.DeadLetterCursor
	)
	for len(pages) < 10 {
		dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{After: after, Limit: 3})
		if err != nil {
			t.Fatal(err)
		}
		if len(dls) == 0 {
			break
		}
		var page []txbox.ID
		for _, dl := range dls {
			page = append(page, dl.ID)
		}
		pages = append(pages, page)
		all = append(all, dls...)
		last := dls[len(dls)-1]
		after = &store.DeadLetterCursor{FailedAt: last.FailedAt, ID: last.ID}
	}
	if len(pages) != 3 || len(pages[0]) != 3 || len(pages[2]) != 1 {
		t.Fatalf("pages = %v, want sizes 3,3,1", pages)
	}
	seen := map[txbox.ID]bool{}
	for i, dl := range all {
		if seen[dl.ID] {
			t.Fatalf("dead letter %s on two pages", dl.ID)
		}
		seen[dl.ID] = true
		if i > 0 {
			p := all[i-1]
			if dl.FailedAt.After(p.FailedAt) || (dl.FailedAt.Equal(p.FailedAt) && bytes.Compare(dl.ID[:], p.ID[:]) >= 0) {
				t.Fatalf("list not ordered by failed_at desc, id desc at %d", i)
			}
		}
	}
	if len(seen) != 7 {
		t.Fatalf("paged through %d dead letters, want 7", len(seen))
	}
}

func testOutboxCleanup(t *testing.T, e *env) {
	e.publish(events("kept", 5)...)
	rows := e.claim("kept", 5, longLease)
	ackedBefore := time.Now() // processed_at is not earlier than this
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	ackedAt := time.Now()           // nor later than this
	e.publish(events("kept", 2)...) // pending, never cleaned up
	cleanup := func(ttl time.Duration, limit int) int {
		t.Helper()
		n, err := e.d.OutboxCleanup(e.ctx, &store.CleanupParams{OlderThan: ttl, Limit: limit})
		if err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		return n
	}
	if n := cleanup(time.Hour, 100); n != 0 {
		t.Fatalf("cleanup with a 1h TTL deleted %d fresh rows", n)
	}
	ttl := 400 * time.Millisecond
	if n := cleanup(ttl, 100); n != 0 && time.Since(ackedBefore) < ttl {
		t.Fatalf("cleanup deleted %d rows before the TTL", n)
	}
	waitUntil(ackedAt.Add(ttl + 50*time.Millisecond))
	if n := cleanup(ttl, 2); n != 2 {
		t.Fatalf("first bounded cleanup deleted %d, want 2", n)
	}
	if n := cleanup(ttl, 2); n != 2 {
		t.Fatalf("second bounded cleanup deleted %d, want 2", n)
	}
	if n := cleanup(ttl, 2); n != 1 {
		t.Fatalf("third bounded cleanup deleted %d, want 1", n)
	}
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
	cleanup := func(ttl time.Duration, limit int) int {
		t.Helper()
		n, err := e.d.DeadLetterCleanup(e.ctx, &store.CleanupParams{OlderThan: ttl, Limit: limit})
		if err != nil {
			t.Fatalf("dead-letter cleanup: %v", err)
		}
		return n
	}
	if n := cleanup(time.Hour, 100); n != 0 {
		t.Fatalf("cleanup with a 1h TTL deleted %d", n)
	}
	ttl := 400 * time.Millisecond
	if n := cleanup(ttl, 100); n != 0 && time.Since(resolvedBefore) < ttl {
		t.Fatalf("cleanup deleted %d before the TTL", n)
	}
	waitUntil(resolvedAt.Add(ttl + 50*time.Millisecond))
	if n := cleanup(ttl, 2); n != 2 {
		t.Fatalf("bounded cleanup deleted %d, want 2", n)
	}
	if n := cleanup(ttl, 2); n != 1 {
		t.Fatalf("second cleanup deleted %d, want 1", n)
	}
	if _, err := e.d.DeadLetterGet(e.ctx, open); err != nil {
		t.Fatalf("unresolved dead letter was cleaned up: %v", err)
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

func testMigrateConcurrent(t *testing.T, e *env) {
	ns := e.h.NewNamespace(t)
	const n = 4
	drivers := make([]store.Driver, n)
	for i := range drivers {
		d, err := e.h.Open(t, ns, "")
		if err != nil {
			t.Fatal(err)
		}
		drivers[i] = d
	}
	var wg sync.WaitGroup
	errs := make([]error, n)
	start := make(chan struct{})
	for i, d := range drivers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			errs[i] = d.Migrate(e.ctx)
		}()
	}
	close(start)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Fatalf("concurrent migrate %d: %v", i, err)
		}
	}
	tables := e.h.Tables(t, ns)
	if err := drivers[0].Migrate(e.ctx); err != nil {
		t.Fatalf("migrate again: %v", err)
	}
	if again := e.h.Tables(t, ns); !slices.Equal(tables, again) {
		t.Fatalf("second migrate changed tables: %v -> %v", tables, again)
	}
	for _, want := range []string{"txbox_outbox", "txbox_dead_letter", "txbox_inbox", "txbox_lease", "txbox_schema_version"} {
		if !slices.Contains(tables, want) {
			t.Fatalf("table %s missing after migrate: %v", want, tables)
		}
	}
	// Two prefixes in one namespace are independent.
	other, err := e.h.Open(t, ns, "second_")
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Migrate(e.ctx); err != nil {
		t.Fatal(err)
	}
	e2 := &env{t: t, h: e.h, ns: ns, d: drivers[1], ctx: e.ctx}
	e2.publish(event("migrated"))
	o := &env{t: t, h: e.h, ns: ns, d: other, ctx: e.ctx}
	if rows := o.claim("migrated", 10, longLease); len(rows) != 0 {
		t.Fatal("a driver with another prefix sees the default prefix's rows")
	}
	if rows := e2.claim("migrated", 10, longLease); len(rows) != 1 {
		t.Fatalf("claimed %d after concurrent migrate, want 1", len(rows))
	}
}

func testHostileIdentifiers(t *testing.T, e *env) {
	before := e.h.Tables(t, e.ns)
	if len(before) == 0 {
		t.Fatal("no tables in the migrated namespace")
	}
	for _, name := range hostile {
		d, err := e.h.Open(t, e.ns, name)
		if err == nil {
			_ = d.Migrate(e.ctx)
			t.Errorf("prefix %q accepted", name)
			continue
		}
		if !errors.Is(err, txbox.ErrInvalidIdentifier) {
			t.Errorf("prefix %q: error %v does not match txbox.ErrInvalidIdentifier", name, err)
		}
	}
	if after := e.h.Tables(t, e.ns); !slices.Equal(before, after) {
		t.Fatalf("tables changed: %v -> %v", before, after)
	}
	e.publish(event("still-works"))
	if rows := e.claim("still-works", 1, longLease); len(rows) != 1 {
		t.Fatal("the namespace stopped working")
	}
}

func keyed(typ, key string) *txbox.Event {
	ev := event(typ)
	ev.Key = key
	return ev
}

func testOrderedByKey(t *testing.T, e *env) {
	const typ = "seq"
	a1, a2, a3 := keyed(typ, "A"), keyed(typ, "A"), keyed(typ, "A")
	b1, b2 := keyed(typ, "B"), keyed(typ, "B")
	n1, n2 := event(typ), event(typ)
	e.publish(a1, b1, a2, n1, b2, a3, n2)
	want := func(step string, rows []*store.OutboxRow, evs ...*txbox.Event) {
		t.Helper()
		if got, w := ids(rows), sortedIDs(evs); !slices.Equal(got, w) {
			t.Fatalf("%s: claimed %v, want %v", step, got, w)
		}
	}
	first := e.claimOrdered(typ, 10)
	want("heads", first, a1, b1, n1, n2)
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("claimed %v while every head is in process", ids(rows))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range first {
		byID[r.ID] = r
	}
	// a1 acked: a2 is the new head. b1 retried: it stays the head (retries
	// keep their id), so b2 waits.
	e.finish(false, item(byID[a1.ID], store.OutcomeAcked, 0, ""), item(byID[b1.ID], store.OutcomeRetry, 0, "again"),
		item(byID[n1.ID], store.OutcomeAcked, 0, ""), item(byID[n2.ID], store.OutcomeAcked, 0, ""))
	second := e.claimOrdered(typ, 10)
	want("after ack and retry", second, a2, b1)
	byID = map[txbox.ID]*store.OutboxRow{}
	for _, r := range second {
		byID[r.ID] = r
	}
	// a2 fails: FAILED parks key A, and after the move the unresolved dead
	// letter keeps it parked.
	e.finish(false, item(byID[a2.ID], store.OutcomeFailed, 0, "poison"), item(byID[b1.ID], store.OutcomeAcked, 0, ""))
	want("a2 failed", e.claimOrdered(typ, 10), b2)
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("parked key released: claimed %v", ids(rows))
	}
	// Unordered claims ignore keys.
	if s := e.stats(typ); s.Pending != 1 {
		t.Fatalf("pending = %d, want 1 (a3)", s.Pending)
	}
	if n, err := e.d.DeadLetterResolve(e.ctx, []txbox.ID{a2.ID}); err != nil || n != 1 {
		t.Fatalf("resolve: %d %v", n, err)
	}
	want("after resolve", e.claimOrdered(typ, 10), a3)
}

func testOrderedParkedRetry(t *testing.T, e *env) {
	const typ = "seq-retry"
	c1, c2 := keyed(typ, "C"), keyed(typ, "C")
	e.publish(c1, c2)
	rows := e.claimOrdered(typ, 10)
	if len(rows) != 1 || rows[0].ID != c1.ID {
		t.Fatalf("claimed %v, want [%s]", ids(rows), c1.ID)
	}
	e.finishAll(rows, store.OutcomeFailed, 0, "poison")
	e.moveAll()
	if rows := e.claimOrdered(typ, 10); len(rows) != 0 {
		t.Fatalf("c2 claimed while c1 is dead-lettered: %v", ids(rows))
	}
	if n, err := e.d.DeadLetterRetry(e.ctx, []txbox.ID{c1.ID}); err != nil || n != 1 {
		t.Fatalf("retry: %d %v", n, err)
	}
	rows = e.claimOrdered(typ, 10)
	if len(rows) != 1 || rows[0].ID != c1.ID {
		t.Fatalf("after retry claimed %v, want the retried head %s", ids(rows), c1.ID)
	}
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	rows = e.claimOrdered(typ, 10)
	if len(rows) != 1 || rows[0].ID != c2.ID {
		t.Fatalf("after the head was acked claimed %v, want %s", ids(rows), c2.ID)
	}
}

func testStats(t *testing.T, e *env) {
	if types, err := e.d.OutboxPendingTypes(e.ctx); err != nil || len(types) != 0 {
		t.Fatalf("pending types of an empty outbox = %v, %v", types, err)
	}
	e.publish(append(append(events("st.a", 3), events("st:b", 2)...), events("st-c", 1)...)...)
	e.claim("st.a", 1, longLease)
	e.finishAll(e.claim("st:b", 1, longLease), store.OutcomeFailed, 0, "x")
	e.finishAll(e.claim("st-c", 1, longLease), store.OutcomeAcked, 0, "")
	types, err := e.d.OutboxPendingTypes(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(types)
	if want := []string{"st.a", "st:b"}; !slices.Equal(types, want) {
		t.Fatalf("pending types = %v, want %v", types, want)
	}
	for _, c := range []store.OutboxTypeStats{
		{EventType: "st.a", Pending: 2, InProcess: 1},
		{EventType: "st:b", Pending: 1, Failed: 1},
		{EventType: "st-c"},
	} {
		s := e.stats(c.EventType)
		if s.Pending != c.Pending || s.InProcess != c.InProcess || s.Failed != c.Failed {
			t.Errorf("stats %s = %+v, want %+v", c.EventType, s, c)
		}
		if c.Pending > 0 && (s.OldestPendingAge < 0 || s.OldestPendingAge > time.Minute) {
			t.Errorf("stats %s oldest pending age %s is not in [0, 1m]", c.EventType, s.OldestPendingAge)
		}
		if c.Pending == 0 && s.OldestPendingAge != 0 {
			t.Errorf("stats %s oldest pending age %s with nothing pending", c.EventType, s.OldestPendingAge)
		}
	}
}

func testDeadLetterMoveConcurrent(t *testing.T, e *env) {
	const total, movers = 60, 4
	e.publish(events("poison-many", total)...)
	e.finishAll(e.claim("poison-many", total, longLease), store.OutcomeFailed, 0, "boom")
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		moved int
		errs  = make(chan error, movers)
	)
	start := make(chan struct{})
	for range movers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				n, err := e.d.DeadLetterMove(e.ctx, &store.DeadLetterMoveParams{Limit: 7})
				if err != nil {
					errs <- err
					return
				}
				if n == 0 {
					return
				}
				mu.Lock()
				moved += n
				mu.Unlock()
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// A mover that saw only locked rows may stop early; what is left is
	// still FAILED, never lost or duplicated.
	moved += e.moveAll()
	if moved != total {
		t.Fatalf("concurrent movers moved %d rows, want %d", moved, total)
	}
	if c, err := e.d.DeadLetterCount(e.ctx, nil); err != nil || c != total {
		t.Fatalf("dead letters = %d (%v), want %d", c, err, total)
	}
	if s := e.stats("poison-many"); s.Failed != 0 {
		t.Fatalf("%d FAILED rows left in the outbox", s.Failed)
	}
}

// testOrderedConcurrent runs 8 claimers on an ordered type: a key never has
// two rows in flight at once, and each key's rows are claimed exactly once,
// in id order.
func testOrderedConcurrent(t *testing.T, e *env) {
	const keys, perKey, claimers = 12, 8, 8
	var evs []*txbox.Event
	for i := range keys * perKey {
		evs = append(evs, keyed("seq-conc", fmt.Sprint("key-", i%keys)))
	}
	e.publish(evs...)
	var (
		mu       sync.Mutex
		inFlight = map[string]bool{}
		order    = map[string][]txbox.ID{}
		claimed  int
		wg       sync.WaitGroup
		errs     = make(chan error, claimers)
	)
	start := make(chan struct{})
	end := time.Now().Add(deadline)
	for range claimers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for {
				mu.Lock()
				n := claimed
				mu.Unlock()
				if n == len(evs) {
					return
				}
				if time.Now().After(end) {
					errs <- fmt.Errorf("timed out with %d of %d claimed", n, len(evs))
					return
				}
				rows, err := e.d.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: "seq-conc", Limit: 3, LeaseDuration: longLease, OrderedByKey: true})
				if err != nil {
					errs <- err
					return
				}
				mu.Lock()
				for _, r := range rows {
					if inFlight[r.Key] {
						mu.Unlock()
						errs <- fmt.Errorf("key %s has two rows in flight", r.Key)
						return
					}
					inFlight[r.Key] = true
					order[r.Key] = append(order[r.Key], r.ID)
					claimed++
				}
				// Leave the flight before the finish commits: the next row
				// of the key cannot be claimed until it has.
				for _, r := range rows {
					delete(inFlight, r.Key)
				}
				mu.Unlock()
				if len(rows) == 0 {
					// Every head is in flight elsewhere: poll again shortly.
					time.Sleep(5 * time.Millisecond)
					continue
				}
				items := make([]store.OutboxFinishItem, len(rows))
				for i, r := range rows {
					items[i] = item(r, store.OutcomeAcked, 0, "")
				}
				if _, err := e.d.OutboxFinish(e.ctx, &store.OutboxFinishParams{Items: items}); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for k, got := range order {
		var want []txbox.ID
		for _, ev := range evs {
			if ev.Key == k {
				want = append(want, ev.ID)
			}
		}
		slices.SortFunc(want, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
		if !slices.Equal(got, want) {
			t.Fatalf("key %s claimed in order %v, want %v", k, got, want)
		}
	}
	if len(order) != keys {
		t.Fatalf("claimed %d keys, want %d", len(order), keys)
	}
}

func testFinishAndClaim(t *testing.T, e *env) {
	fc := e.d.(store.OutboxFinishClaimer)
	e.publish(events("fold", 7)...)
	claim := &store.OutboxClaimParams{EventType: "fold", Limit: 3, LeaseDuration: longLease}
	acked := func(rows []*store.OutboxRow) *store.OutboxFinishParams {
		p := &store.OutboxFinishParams{}
		for _, r := range rows {
			p.Items = append(p.Items, item(r, store.OutcomeAcked, 0, ""))
		}
		return p
	}
	res, first, err := fc.OutboxFinishAndClaim(e.ctx, &store.OutboxFinishParams{}, claim)
	if err != nil || res.Finished != 0 || res.Fenced != 0 || len(first) != 3 {
		t.Fatalf("nothing to finish + claim: %+v, %d rows, %v", res, len(first), err)
	}
	res, second, err := fc.OutboxFinishAndClaim(e.ctx, acked(first), claim)
	if err != nil || res.Finished != 3 || res.Fenced != 0 || len(second) != 3 {
		t.Fatalf("finish + claim: %+v, %d rows, %v", res, len(second), err)
	}
	for _, r := range second {
		if slices.Contains(ids(first), r.ID) {
			t.Fatalf("row %s claimed twice", r.ID)
		}
	}
	// A stale finish is fenced; the claim still happens.
	res, third, err := fc.OutboxFinishAndClaim(e.ctx, acked(first), claim)
	if err != nil || res.Finished != 0 || res.Fenced != 3 || len(third) != 1 {
		t.Fatalf("stale finish + claim: %+v, %d rows, %v", res, len(third), err)
	}
	// Bad claim parameters: an error, and the finish is not applied.
	bad := *claim
	bad.Limit = 0
	if _, _, err := fc.OutboxFinishAndClaim(e.ctx, acked(second), &bad); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("bad claim parameters: %v, want store.ErrInvalidParams", err)
	}
	if s := e.stats("fold"); s.InProcess != 4 {
		t.Fatalf("in process after a refused call = %d, want 4", s.InProcess)
	}
	res, rest, err := fc.OutboxFinishAndClaim(e.ctx, acked(append(second, third...)), claim)
	if err != nil || res.Finished != 4 || len(rest) != 0 {
		t.Fatalf("last finish + claim: %+v, %d rows, %v", res, len(rest), err)
	}
	if s := e.stats("fold"); s.InProcess+s.Pending != 0 {
		t.Fatalf("rows left: %+v", s)
	}
}
