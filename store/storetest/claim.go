package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

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
	)
	together(t, claimers, func(int) error {
		for empty := 0; empty < 3; {
			rows, err := e.d.OutboxClaim(e.ctx, &store.OutboxClaimParams{EventType: "contended", Limit: 7, LeaseDuration: longLease})
			if err != nil {
				return err
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
				return err
			}
			if res.Finished != len(rows) {
				return fmt.Errorf("finish of an exclusive batch: finished %d of %d", res.Finished, len(rows))
			}
		}
		return nil
	})
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
