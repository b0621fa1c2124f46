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
// exclusive on every dialect (store.DeadLetterFilter).
func testDeadLetterFailedWindow(t *testing.T, e *env) {
	id := e.deadLetter("window", "", "x")
	dl, err := e.d.DeadLetterGet(e.ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	at := dl.FailedAt
	// One millisecond: the coarsest precision a dialect stores (SQLite).
	const step = time.Millisecond
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
