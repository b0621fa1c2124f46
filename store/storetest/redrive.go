package storetest

import (
	"bytes"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// ExerciseRedrive runs the suite of store.OutboxRedriver, the redrive of
// kept events, against the dialect behind h. Every txbox dialect
// implements it; a dialect that does not fails.
func ExerciseRedrive(t *testing.T, h Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env, store.OutboxRedriver)
	}{
		{"RedriveProcessedWindow", testRedriveWindow},
		{"RedriveDryRunChangesNothing", testRedriveDryRun},
		{"RedriveTypeWithoutRows", testRedriveEmpty},
		{"RedriveCursorCoversEveryRowOnce", testRedriveCursor},
		{"RedriveKeyAndIDs", testRedriveKeyAndIDs},
		{"RedriveResetsAttemptsAndError", testRedriveResets},
		{"RedriveOrderedKeyGoesFirst", testRedriveOrdered},
		{"RedriveBadParams", testRedriveBadParams},
		{"RedriveConcurrentChangesEachRowOnce", testRedriveConcurrent},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, h)
			r, ok := e.d.(store.OutboxRedriver)
			if !ok {
				t.Fatalf("%s driver does not implement store.OutboxRedriver", e.d.Dialect())
			}
			tc.fn(t, e, r)
		})
	}
}

// deliver publishes evs and acks them in one finish, so they share one
// processed_at, and returns it, read back through a dry run.
func (e *env) deliver(r store.OutboxRedriver, evs ...*txbox.Event) time.Time {
	e.t.Helper()
	e.publish(evs...)
	rows := e.claim(evs[0].Type, len(evs), longLease)
	if len(rows) != len(evs) {
		e.t.Fatalf("claim of %d events to deliver: got %d", len(evs), len(rows))
	}
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	res := e.redrive(r, store.OutboxRedriveParams{EventType: evs[0].Type, IDs: sortedIDs(evs), Limit: len(evs), DryRun: true})
	if res.Matched != len(evs) || !res.Oldest.Equal(res.Newest) || res.Oldest.IsZero() {
		e.t.Fatalf("delivered %d events: dry run matched %d, processed %s to %s", len(evs), res.Matched, res.Oldest, res.Newest)
	}
	return res.Oldest
}

func (e *env) redrive(r store.OutboxRedriver, p store.OutboxRedriveParams) *store.OutboxRedriveResult {
	e.t.Helper()
	res, err := r.OutboxRedrive(e.ctx, &p)
	if err != nil {
		e.t.Fatalf("redrive %+v: %v", p, err)
	}
	return res
}

// separate waits past the coarsest stored precision (SQLite's
// milliseconds), so the next finish gets a later processed_at.
func separate() { time.Sleep(5 * time.Millisecond) }

// testRedriveWindow: a processed_at window [after, before) re-pends
// exactly the rows processed in it, with their ids; rows outside it,
// pending rows and other types stay as they were.
func testRedriveWindow(t *testing.T, e *env, r store.OutboxRedriver) {
	early, mid, late := events("kept", 3), events("kept", 4), events("kept", 2)
	tEarly := e.deliver(r, early...)
	separate()
	tMid := e.deliver(r, mid...)
	separate()
	tLate := e.deliver(r, late...)
	if !tEarly.Before(tMid) || !tMid.Before(tLate) {
		t.Fatalf("processed times not increasing: %s %s %s", tEarly, tMid, tLate)
	}
	e.deliver(r, events("other", 2)...)
	pending := event("kept")
	e.publish(pending)

	res := e.redrive(r, store.OutboxRedriveParams{EventType: "kept", ProcessedAfter: tMid, ProcessedBefore: tLate, Limit: 100})
	if res.Matched != len(mid) || res.Changed != len(mid) {
		t.Fatalf("redrive of the middle window: matched %d changed %d, want %d", res.Matched, res.Changed, len(mid))
	}
	want := sortedIDs(mid)
	if res.Last != want[len(want)-1] || !slices.Equal(res.Sample, want) {
		t.Fatalf("redrive: last %s sample %v, want the ids %v in order", res.Last, res.Sample, want)
	}
	if !res.Oldest.Equal(tMid) || !res.Newest.Equal(tMid) {
		t.Fatalf("redrive: processed %s to %s, want %s", res.Oldest, res.Newest, tMid)
	}
	// The redriven rows and the one pending row are claimable, nothing
	// else; with the same ids and payloads.
	rows := e.claim("kept", 100, longLease)
	got := ids(rows)
	slices.SortFunc(got, compareIDs)
	all := sortedIDs(append(slices.Clone(mid), pending))
	if !slices.Equal(got, all) {
		t.Fatalf("claim after redrive: %v, want %v", got, all)
	}
	for _, row := range rows {
		for _, ev := range mid {
			if row.ID == ev.ID && string(row.Payload) != string(ev.Payload) {
				t.Fatalf("redriven row %s payload %q, want %q", row.ID, row.Payload, ev.Payload)
			}
		}
	}
	// Early and late stay processed; the other type too.
	left := e.redrive(r, store.OutboxRedriveParams{EventType: "kept", Limit: 100, DryRun: true})
	if left.Matched != len(early)+len(late) {
		t.Fatalf("processed rows left: %d, want %d", left.Matched, len(early)+len(late))
	}
	if o := e.redrive(r, store.OutboxRedriveParams{EventType: "other", Limit: 100, DryRun: true}); o.Matched != 2 {
		t.Fatalf("processed rows of the other type: %d, want 2", o.Matched)
	}
	// The bounds are half-open: before = the window's own time selects
	// nothing of it, after = the late time selects the late rows only.
	if n := e.redrive(r, store.OutboxRedriveParams{EventType: "kept", ProcessedBefore: tEarly, Limit: 100, DryRun: true}).Matched; n != 0 {
		t.Fatalf("ProcessedBefore = the earliest processed_at matched %d, want 0 (exclusive)", n)
	}
	if n := e.redrive(r, store.OutboxRedriveParams{EventType: "kept", ProcessedAfter: tLate, Limit: 100, DryRun: true}).Matched; n != len(late) {
		t.Fatalf("ProcessedAfter = the latest processed_at matched %d, want %d (inclusive)", n, len(late))
	}
	// In any zone, compared in UTC.
	east := time.FixedZone("+14:00", 14*3600)
	if n := e.redrive(r, store.OutboxRedriveParams{EventType: "kept", ProcessedAfter: tLate.In(east), Limit: 100, DryRun: true}).Matched; n != len(late) {
		t.Fatalf("ProcessedAfter at +14:00 matched %d, want %d", n, len(late))
	}
}

func testRedriveDryRun(t *testing.T, e *env, r store.OutboxRedriver) {
	evs := events("dry", 3)
	e.deliver(r, evs...)
	for range 2 {
		res := e.redrive(r, store.OutboxRedriveParams{EventType: "dry", Limit: 10, DryRun: true})
		if res.Matched != 3 || res.Changed != 0 {
			t.Fatalf("dry run: matched %d changed %d, want 3 and 0", res.Matched, res.Changed)
		}
	}
	if rows := e.claim("dry", 10, longLease); len(rows) != 0 {
		t.Fatalf("a dry run made %d rows claimable", len(rows))
	}
	if s := e.stats("dry"); s.Pending != 0 {
		t.Fatalf("a dry run left %d rows pending", s.Pending)
	}
}

func testRedriveEmpty(t *testing.T, e *env, r store.OutboxRedriver) {
	e.deliver(r, events("some", 2)...)
	e.publish(events("only-pending", 2)...)
	for _, typ := range []string{"none", "only-pending"} {
		for _, dry := range []bool{true, false} {
			res := e.redrive(r, store.OutboxRedriveParams{EventType: typ, Limit: 10, DryRun: dry})
			if res.Matched != 0 || res.Changed != 0 || res.Last != (txbox.ID{}) || len(res.Sample) != 0 || !res.Oldest.IsZero() {
				t.Fatalf("redrive of %s (dry run %v): %+v, want nothing", typ, dry, res)
			}
		}
	}
}

// testRedriveCursor: pages of 3 after each page's Last cover every row
// exactly once, in id order, whether they change the rows or not.
func testRedriveCursor(t *testing.T, e *env, r store.OutboxRedriver) {
	evs := events("paged", 8)
	e.deliver(r, evs[:5]...)
	e.deliver(r, evs[5:]...)
	want := sortedIDs(evs)
	for _, dry := range []bool{true, false} {
		var seen []txbox.ID
		var after txbox.ID
		changed := 0
		for page := 0; ; page++ {
			res := e.redrive(r, store.OutboxRedriveParams{EventType: "paged", After: after, Limit: 3, DryRun: dry})
			if res.Matched == 0 {
				break
			}
			if page > 3 {
				t.Fatalf("more pages than rows")
			}
			seen = append(seen, res.Sample...)
			changed += res.Changed
			after = res.Last
		}
		if !slices.Equal(seen, want) {
			t.Fatalf("pages (dry run %v) saw %v, want %v", dry, seen, want)
		}
		if wantChanged := map[bool]int{true: 0, false: len(evs)}[dry]; changed != wantChanged {
			t.Fatalf("pages (dry run %v) changed %d, want %d", dry, changed, wantChanged)
		}
	}
	if rows := e.claim("paged", 100, longLease); len(rows) != len(evs) {
		t.Fatalf("claimed %d redriven rows, want %d", len(rows), len(evs))
	}
}

func testRedriveKeyAndIDs(t *testing.T, e *env, r store.OutboxRedriver) {
	evs := events("keyed", 6)
	for i, ev := range evs {
		ev.Key = []string{"k1", "k2", ""}[i%3]
	}
	e.deliver(r, evs...)
	if res := e.redrive(r, store.OutboxRedriveParams{EventType: "keyed", Key: "k1", Limit: 10, DryRun: true}); !slices.Equal(res.Sample, sortedIDs([]*txbox.Event{evs[0], evs[3]})) {
		t.Fatalf("key k1 selected %v", res.Sample)
	}
	pick := []txbox.ID{evs[1].ID, evs[2].ID, txbox.NewID()} // one unknown id
	res := e.redrive(r, store.OutboxRedriveParams{EventType: "keyed", IDs: pick, Limit: 10})
	if res.Matched != 2 || res.Changed != 2 {
		t.Fatalf("redrive of 2 ids and an unknown one: matched %d changed %d", res.Matched, res.Changed)
	}
	got := ids(e.claim("keyed", 10, longLease))
	slices.SortFunc(got, compareIDs)
	if !slices.Equal(got, sortedIDs(evs[1:3])) {
		t.Fatalf("claimed %v after redriving %v", got, pick[:2])
	}
	// An id of another type is not redriven under this one.
	other := event("unkeyed")
	e.deliver(r, other)
	if res := e.redrive(r, store.OutboxRedriveParams{EventType: "keyed", IDs: []txbox.ID{other.ID}, Limit: 10}); res.Matched != 0 {
		t.Fatalf("an id of another type matched")
	}
}

// testRedriveResets: a row that was retried before it was delivered comes
// back with attempts 0 and no last error, due now.
func testRedriveResets(t *testing.T, e *env, r store.OutboxRedriver) {
	ev := event("resets")
	e.publish(ev)
	rows := e.claim("resets", 1, longLease)
	e.finishAll(rows, store.OutcomeRetry, 0, "first try failed")
	var again []*store.OutboxRow
	eventually(t, "the retried row", func() bool { again = e.claim("resets", 1, longLease); return len(again) == 1 })
	if again[0].Attempts != 1 {
		t.Fatalf("attempts after a retry: %d", again[0].Attempts)
	}
	e.finishAll(again, store.OutcomeAcked, 0, "")
	if res := e.redrive(r, store.OutboxRedriveParams{EventType: "resets", Limit: 1}); res.Changed != 1 {
		t.Fatalf("redrive changed %d", res.Changed)
	}
	if le := e.h.OutboxLastError(t, e.d, ev.ID); le != "" {
		t.Fatalf("last error after redrive: %q, want none", le)
	}
	back := e.claim("resets", 1, longLease)
	if len(back) != 1 || back[0].ID != ev.ID || back[0].Attempts != 0 {
		t.Fatalf("claim after redrive: %+v", back)
	}
	if res := e.redrive(r, store.OutboxRedriveParams{EventType: "resets", Limit: 1}); res.Matched != 0 {
		t.Fatalf("an in-process row was matched")
	}
}

// testRedriveOrdered: on an ordered claim, a key's redriven rows go out in
// their original order and ahead of the key's rows still pending.
func testRedriveOrdered(t *testing.T, e *env, r store.OutboxRedriver) {
	old := events("ord", 2)
	for _, ev := range old {
		ev.Key = "k"
		e.publish(ev) // one transaction each: their key order is id order
	}
	rows := e.claimOrdered("ord", 10)
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	rows = e.claimOrdered("ord", 10)
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	newer := event("ord")
	newer.Key = "k"
	e.publish(newer)
	if res := e.redrive(r, store.OutboxRedriveParams{EventType: "ord", Limit: 10}); res.Changed != 2 {
		t.Fatalf("redrive changed %d, want 2", res.Changed)
	}
	for i, want := range []txbox.ID{old[0].ID, old[1].ID, newer.ID} {
		got := e.claimOrdered("ord", 10)
		if len(got) != 1 || got[0].ID != want {
			t.Fatalf("ordered claim %d: %v, want %s", i, ids(got), want)
		}
		e.finishAll(got, store.OutcomeAcked, 0, "")
	}
}

func testRedriveBadParams(t *testing.T, e *env, r store.OutboxRedriver) {
	tooMany := make([]txbox.ID, store.MaxFilterIDs+1)
	for _, p := range []*store.OutboxRedriveParams{
		nil,
		{Limit: 1},
		{EventType: "x"},
		{EventType: "x", Limit: store.MaxRedrivePage + 1},
		{EventType: "x", Limit: 1, IDs: tooMany},
		{EventType: "x", Limit: 1, ProcessedAfter: store.MinFilterTime.Add(-time.Nanosecond)},
		{EventType: "x", Limit: 1, ProcessedBefore: store.MaxFilterTime.Add(time.Nanosecond)},
	} {
		if _, err := r.OutboxRedrive(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("redrive %+v: %v, want ErrInvalidParams", p, err)
		}
	}
}

func compareIDs(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) }

// testRedriveConcurrent: four redrives of the same rows at once change
// each row once between them: a row that is no longer PROCESSED when a
// redrive reaches it is matched, not changed.
func testRedriveConcurrent(t *testing.T, e *env, r store.OutboxRedriver) {
	evs := events("race", 20)
	e.deliver(r, evs...)
	var wg sync.WaitGroup
	changed := make([]int, 4)
	errs := make([]error, 4)
	for i := range changed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := r.OutboxRedrive(e.ctx, &store.OutboxRedriveParams{EventType: "race", Limit: 100})
			if err == nil {
				changed[i] = res.Changed
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	total := 0
	for i := range changed {
		if errs[i] != nil {
			t.Fatalf("redrive %d: %v", i, errs[i])
		}
		total += changed[i]
	}
	if total != len(evs) {
		t.Fatalf("concurrent redrives changed %v, %d in all, want %d", changed, total, len(evs))
	}
	if rows := e.claim("race", 100, longLease); len(rows) != len(evs) {
		t.Fatalf("claimed %d redriven rows, want %d", len(rows), len(evs))
	}
}
