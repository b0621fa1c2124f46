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

// testDeadLetterFailedAt: a dead letter's failed_at is when its row
// failed, not when the mover copied it; the mover may run long after.
func testDeadLetterFailedAt(t *testing.T, e *env) {
	const gap = 600 * time.Millisecond
	ev := event("failed-at")
	e.publish(ev)
	rows := e.claim("failed-at", 1, longLease)
	before := time.Now()
	e.finishAll(rows, store.OutcomeFailed, 0, "boom")
	after := time.Now()
	waitUntil(after.Add(gap))
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, ev.ID)
	if err != nil {
		t.Fatal(err)
	}
	// The database and the test share the host's clock; the slack covers
	// the dialect's precision (milliseconds on SQLite), not the gap.
	const slack = 100 * time.Millisecond
	if dl.FailedAt.Before(before.Add(-slack)) || dl.FailedAt.After(after.Add(slack)) {
		t.Fatalf("failed_at = %s, want the failure time, between %s and %s (the move came %s later)",
			dl.FailedAt.UTC().Format(time.RFC3339Nano), before.UTC().Format(time.RFC3339Nano), after.UTC().Format(time.RFC3339Nano), gap)
	}
}

// testDeadLetterFailedWindow: FailedAfter is inclusive and FailedBefore
// exclusive on every dialect (store.DeadLetterFilter), compared in UTC
// and exactly: a bound a nanosecond after a stored time is after it
// whatever the stored precision. A bound outside the range every dialect
// stores is refused rather than compared wrongly (store.CheckFilterTime):
// 9999-12-31T23:59:59-14:00 is year 10000 in UTC.
func testDeadLetterFailedWindow(t *testing.T, e *env) {
	id := e.deadLetter("window", "", "x")
	dl, err := e.d.DeadLetterGet(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	at := dl.FailedAt
	// One millisecond: the coarsest precision a dialect stores (SQLite).
	const step = time.Millisecond
	east := time.FixedZone("+14:00", 14*3600)
	west := time.FixedZone("-14:00", -14*3600)
	for _, c := range []struct {
		name string
		f    store.DeadLetterFilter
		want int64
	}{
		{"FailedAfter = failed_at (inclusive)", store.DeadLetterFilter{FailedAfter: at}, 1},
		{"FailedAfter just after", store.DeadLetterFilter{FailedAfter: at.Add(step)}, 0},
		{"FailedBefore = failed_at (exclusive)", store.DeadLetterFilter{FailedBefore: at}, 0},
		{"FailedBefore just after", store.DeadLetterFilter{FailedBefore: at.Add(step)}, 1},
		{"window [failed_at, failed_at+1ms)", store.DeadLetterFilter{FailedAfter: at, FailedBefore: at.Add(step)}, 1},
		{"FailedAfter a nanosecond after", store.DeadLetterFilter{FailedAfter: at.Add(time.Nanosecond)}, 0},
		{"FailedBefore a nanosecond after", store.DeadLetterFilter{FailedBefore: at.Add(time.Nanosecond)}, 1},
		{"FailedAfter a nanosecond before", store.DeadLetterFilter{FailedAfter: at.Add(-time.Nanosecond)}, 1},
		{"FailedBefore a nanosecond before", store.DeadLetterFilter{FailedBefore: at.Add(-time.Nanosecond)}, 0},
		{"FailedAfter = failed_at at +14:00", store.DeadLetterFilter{FailedAfter: at.In(east)}, 1},
		{"FailedBefore = failed_at at -14:00", store.DeadLetterFilter{FailedBefore: at.In(west)}, 0},
		{"FailedBefore the last storable instant", store.DeadLetterFilter{FailedBefore: store.MaxFilterTime}, 1},
		{"FailedAfter the first storable instant", store.DeadLetterFilter{FailedAfter: store.MinFilterTime}, 1},
		{"FailedAfter the last storable instant at -14:00", store.DeadLetterFilter{FailedAfter: store.MaxFilterTime.In(west)}, 0},
	} {
		n, err := e.d.DeadLetterCount(e.ctx, &c.f)
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if n != c.want {
			t.Errorf("%s: count = %d, want %d", c.name, n, c.want)
		}
		dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Filter: c.f, Limit: 10})
		if err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if int64(len(dls)) != c.want {
			t.Errorf("%s: listed %d, want %d", c.name, len(dls), c.want)
		}
	}
	for _, bad := range []time.Time{
		time.Date(9999, 12, 31, 23, 59, 59, 0, west),
		store.MaxFilterTime.Add(time.Nanosecond),
		store.MinFilterTime.Add(-time.Nanosecond),
		time.Date(1000, 1, 1, 0, 0, 0, 0, east),
	} {
		for _, f := range []store.DeadLetterFilter{{FailedAfter: bad}, {FailedBefore: bad}} {
			if _, err := e.d.DeadLetterCount(e.ctx, &f); !errors.Is(err, store.ErrInvalidParams) {
				t.Errorf("count with %+v: %v, want ErrInvalidParams", f, err)
			}
			if _, err := e.d.DeadLetterListIDs(e.ctx, &store.DeadLetterListParams{Filter: f, Limit: 1}); !errors.Is(err, store.ErrInvalidParams) {
				t.Errorf("list ids with %+v: %v, want ErrInvalidParams", f, err)
			}
		}
	}
}

// testDeadLetterRetryKeepsError: a retried dead letter goes back to the
// outbox with its last error, so whoever looks at the row sees why it
// failed before; and an id that is already back in the outbox (published
// again) stays dead-lettered without failing the retry of the others.
func testDeadLetterRetryKeepsError(t *testing.T, e *env) {
	id := e.deadLetter("kept-error", "", "the first failure")
	dup := e.deadLetter("kept-error", "", "dup")
	again := event("kept-error")
	again.ID = dup
	e.publish(again)
	n, err := e.d.DeadLetterRetry(e.ctx, []txbox.ID{dup, id})
	if err != nil {
		t.Fatalf("retry with one id already in the outbox: %v", err)
	}
	if n != 1 {
		t.Fatalf("retry moved %d, want 1", n)
	}
	if got := e.h.OutboxLastError(t, e.d, id); got != "the first failure" {
		t.Errorf("retried row's last_error = %q, want the dead letter's", got)
	}
	if _, err := e.d.DeadLetterGet(e.ctx, dup); err != nil {
		if errors.Is(err, txbox.ErrNotFound) {
			t.Fatal("the dead letter whose id was back in the outbox was dropped")
		}
		t.Fatal(err)
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
		{store.DeadLetterFilter{ErrorContains: "TimeOut"}, []txbox.ID{b1, a1}}, // any case, on every dialect
		{store.DeadLetterFilter{ErrorContains: "SCHEMA Mismatch"}, []txbox.ID{a2}},
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
	e.deadLetters("paged", 7)
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

func testDeadLetterMoveConcurrent(t *testing.T, e *env) {
	const total, movers = 60, 4
	e.publish(events("poison-many", total)...)
	e.finishAll(e.claim("poison-many", total, longLease), store.OutcomeFailed, 0, "boom")
	var (
		mu    sync.Mutex
		moved int
	)
	together(t, movers, func(int) error {
		for {
			n, err := e.d.DeadLetterMove(e.ctx, &store.DeadLetterMoveParams{Limit: 7})
			if err != nil || n == 0 {
				return err
			}
			mu.Lock()
			moved += n
			mu.Unlock()
		}
	})
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

// testDeadLetterListSizes: listings read each payload's size, never the
// payload (store.DeadLetters.DeadLetterList), so a page of large dead
// letters weighs what a page of small ones does; DeadLetterGet reads the
// payload. DeadLetterListIDs lists the same dead letters in the same
// order, and the IDs filter keeps only the ids it names.
func testDeadLetterListSizes(t *testing.T, e *env) {
	sizes := []int{0, 1, 300 << 10, 1 << 20}
	want := map[txbox.ID]int{}
	var named []txbox.ID
	for i, size := range sizes {
		ev := event("sized")
		ev.Payload = bytes.Repeat([]byte{byte('a' + i)}, size)
		e.publish(ev)
		e.finishAll(e.claim("sized", 1, longLease), store.OutcomeFailed, 0, "too big")
		want[ev.ID] = size
		if size > 1 {
			named = append(named, ev.ID)
		}
	}
	if n := e.moveAll(); n != len(sizes) {
		t.Fatalf("moved %d, want %d", n, len(sizes))
	}
	dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	entries, err := e.d.DeadLetterListIDs(e.ctx, &store.DeadLetterListParams{Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	if len(dls) != len(sizes) || len(entries) != len(sizes) {
		t.Fatalf("listed %d and %d entries, want %d", len(dls), len(entries), len(sizes))
	}
	for i, dl := range dls {
		if dl.Payload != nil {
			t.Errorf("listing read the payload of %s (%d bytes): it must read its size only", dl.ID, len(dl.Payload))
		}
		if dl.PayloadSize != want[dl.ID] {
			t.Errorf("listed size of %s = %d, want %d", dl.ID, dl.PayloadSize, want[dl.ID])
		}
		if en := entries[i]; en.ID != dl.ID || !en.FailedAt.Equal(dl.FailedAt) || en.Status != dl.Status {
			t.Errorf("entry %d = %+v, want the listing's %s %s %s", i, en, dl.ID, dl.FailedAt, dl.Status)
		}
		got, err := e.d.DeadLetterGet(e.ctx, dl.ID)
		if err != nil {
			t.Fatal(err)
		}
		if len(got.Payload) != want[dl.ID] || got.PayloadSize != want[dl.ID] || got.Payload == nil {
			t.Errorf("get %s: %d bytes, size %d, want %d", dl.ID, len(got.Payload), got.PayloadSize, want[dl.ID])
		}
	}
	f := store.DeadLetterFilter{IDs: append(slices.Clone(named), txbox.NewID())}
	byID, err := e.d.DeadLetterListIDs(e.ctx, &store.DeadLetterListParams{Filter: f, Limit: 10})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]txbox.ID, len(byID))
	for i, en := range byID {
		got[i] = en.ID
	}
	slices.SortFunc(got, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
	slices.SortFunc(named, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
	if !slices.Equal(got, named) {
		t.Errorf("IDs filter listed %v, want %v", got, named)
	}
	if n, err := e.d.DeadLetterCount(e.ctx, &f); err != nil || n != int64(len(named)) {
		t.Errorf("IDs filter counted %d (%v), want %d", n, err, len(named))
	}
	tooMany := store.DeadLetterFilter{IDs: make([]txbox.ID, store.MaxFilterIDs+1)}
	if _, err := e.d.DeadLetterCount(e.ctx, &tooMany); !errors.Is(err, store.ErrInvalidParams) {
		t.Errorf("count with %d ids: %v, want ErrInvalidParams", len(tooMany.IDs), err)
	}
}

// testDeadLetterWalkOnce: a bulk action's walk (store.DeadLetterWalk)
// hands every matching dead letter over exactly once while it acts on
// each page, even as new dead letters arrive and the ones it retried fail
// again: those come back with a later failure time, above the walk.
func testDeadLetterWalkOnce(t *testing.T, e *env) {
	evs := e.deadLetters("walked", 9)
	seen := map[txbox.ID]int{}
	pages := 0
	next, err := store.DeadLetterWalk(e.ctx, e.d, &store.DeadLetterWalkParams{Filter: store.DeadLetterFilter{EventType: "walked"}, PageSize: 2},
		func(page []store.DeadLetterEntry) error {
			pages++
			ids := make([]txbox.ID, len(page))
			for i, en := range page {
				seen[en.ID]++
				ids[i] = en.ID
			}
			if n, err := e.d.DeadLetterRetry(e.ctx, ids); err != nil || n != len(ids) {
				t.Fatalf("retry page %d: %d of %d, %v", pages, n, len(ids), err)
			}
			// Racing: the retried events fail again, and a new one.
			e.publish(event("walked"))
			e.finishAll(e.claim("walked", 10, longLease), store.OutcomeFailed, 0, "again")
			e.moveAll()
			return nil
		})
	if err != nil || next != nil {
		t.Fatalf("walk: next %v, %v", next, err)
	}
	for _, ev := range evs {
		if seen[ev.ID] != 1 {
			t.Errorf("dead letter %s handed over %d times, want once", ev.ID, seen[ev.ID])
		}
	}
	if len(seen) != len(evs) || pages != 5 {
		t.Errorf("walk handed over %d dead letters in %d pages, want the 9 there at the start in 5", len(seen), pages)
	}
	// Limit stops the walk and says where to go on.
	var first []txbox.ID
	next, err = store.DeadLetterWalk(e.ctx, e.d, &store.DeadLetterWalkParams{Filter: store.DeadLetterFilter{EventType: "walked"}, Limit: 3},
		func(page []store.DeadLetterEntry) error {
			for _, en := range page {
				first = append(first, en.ID)
			}
			return nil
		})
	if err != nil || next == nil || len(first) != 3 {
		t.Fatalf("walk with limit 3: %d, next %v, %v", len(first), next, err)
	}
	rest := 0
	if _, err := store.DeadLetterWalk(e.ctx, e.d, &store.DeadLetterWalkParams{Filter: store.DeadLetterFilter{EventType: "walked"}, After: next},
		func(page []store.DeadLetterEntry) error {
			for _, en := range page {
				if slices.Contains(first, en.ID) {
					t.Errorf("%s handed over again after the cursor", en.ID)
				}
			}
			rest += len(page)
			return nil
		}); err != nil {
		t.Fatal(err)
	}
	if n, err := e.d.DeadLetterCount(e.ctx, &store.DeadLetterFilter{EventType: "walked"}); err != nil || int64(3+rest) != n {
		t.Errorf("walked 3 + %d, counted %d (%v)", rest, n, err)
	}
}

// deadLetters publishes n events of typ, fails them for good and moves
// them to the dead-letter table.
func (e *env) deadLetters(typ string, n int) []*txbox.Event {
	e.t.Helper()
	evs := events(typ, n)
	e.publish(evs...)
	e.finishAll(e.claim(typ, n, longLease), store.OutcomeFailed, 0, "x")
	if moved := e.moveAll(); moved != n {
		e.t.Fatalf("moved %d, want %d", moved, n)
	}
	return evs
}
