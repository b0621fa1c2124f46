package storetest

import (
	"errors"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// poisonText is a sender error as a broker or an HTTP server may return
// it: a NUL byte and bytes that are not UTF-8. PostgreSQL text refuses
// both (SQLSTATE 22021).
const poisonText = "reply \x00 from broker: \xff\xfe bad bytes \xc3"

// testFinishSanitisesText: a finish whose error texts the database would
// refuse succeeds as a whole, acked rows included, and stores the
// sanitised text (store.SanitizeText) on every dialect.
func testFinishSanitisesText(t *testing.T, e *env) {
	evs := events("poisoned", 3)
	e.publish(evs...)
	rows := e.claim("poisoned", 3, longLease)
	if len(rows) != 3 {
		t.Fatalf("claimed %d, want 3", len(rows))
	}
	byID := map[txbox.ID]*store.OutboxRow{}
	for _, r := range rows {
		byID[r.ID] = r
	}
	res, err := e.d.OutboxFinish(e.ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
		item(byID[evs[0].ID], store.OutcomeFailed, 0, poisonText),
		item(byID[evs[1].ID], store.OutcomeRetry, time.Hour, poisonText),
		item(byID[evs[2].ID], store.OutcomeAcked, 0, ""),
	}})
	if err != nil {
		t.Fatalf("finish with a NUL and invalid UTF-8 in the error: %v", err)
	}
	if res.Finished != 3 || res.Fenced != 0 {
		t.Fatalf("finish = %+v, want 3 finished", res)
	}
	want := store.SanitizeText(poisonText)
	if strings.ContainsRune(want, 0) || !utf8.ValidString(want) {
		t.Fatalf("SanitizeText(%q) = %q", poisonText, want)
	}
	if got := e.h.OutboxLastError(t, e.d, evs[1].ID); got != want {
		t.Errorf("retried row's last_error = %q, want %q", got, want)
	}
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d, want 1", n)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, evs[0].ID)
	if err != nil {
		t.Fatal(err)
	}
	if dl.LastError != want {
		t.Errorf("dead letter's last error = %q, want %q", dl.LastError, want)
	}
	if s := e.stats("poisoned"); s.Pending != 1 || s.InProcess != 0 {
		t.Errorf("stats = %+v, want the retried row pending and nothing in process", s)
	}
}

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
