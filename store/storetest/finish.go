package storetest

import (
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

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
