package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// TestUnreadableRowsNeverFailTheClaim: SQLite stores whatever a plain-SQL
// producer writes. Rows written before schema version 2 (whose triggers
// now refuse them) with headers that are not a JSON object, attempts that
// are not a number or a created_at in another format are claimed with
// OutboxRow.Invalid saying why, a row whose id is not a canonical UUID
// (the finish could not find it by id) is failed inside the claim, and
// their neighbours are claimed as usual. None of them fails the claim,
// which used to wedge the type.
func TestUnreadableRowsNeverFailTheClaim(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	db := b.d.DB()
	for _, trig := range []string{"txbox_outbox_check_insert", "txbox_outbox_check_update"} {
		if _, err := db.Exec(`DROP TRIGGER ` + trig); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(id, headers, created string, attempts any) {
		t.Helper()
		if _, err := db.Exec(`INSERT INTO txbox_outbox (id, event_type, payload, headers, created_at, attempts) VALUES (?, 'odd', 'p', ?, ?, ?)`,
			id, headers, created, attempts); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Format(timeLayout)
	good, array, text, late, count := txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID(), txbox.NewID()
	upper := strings.ToUpper(txbox.NewID().String())
	insert(good.String(), `{"n": 1}`, now, 0)
	insert(array.String(), `[1, 2]`, now, 0)
	insert(text.String(), `not json`, now, 0)
	insert(late.String(), `{}`, "yesterday", 0)
	insert(count.String(), `{}`, now, "three")
	insert(upper, `{}`, now, 0)
	insert("not-a-uuid", `{}`, now, 0)

	rows, err := b.d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "odd", Limit: 10, LeaseDuration: time.Minute})
	if err != nil {
		t.Fatalf("claim with unreadable rows: %v", err)
	}
	want := map[txbox.ID]string{good: "", array: "not a JSON object", text: "not a JSON object", late: "created_at", count: "attempts"}
	if len(rows) != len(want) {
		t.Fatalf("claimed %d rows, want %d", len(rows), len(want))
	}
	for _, r := range rows {
		reason, ok := want[r.ID]
		if !ok {
			t.Fatalf("claimed unexpected row %s", r.ID)
		}
		if (reason == "") != (r.Invalid == "") || !strings.Contains(r.Invalid, reason) {
			t.Errorf("row %s: Invalid = %q, want it to mention %q", r.ID, r.Invalid, reason)
		}
		if r.ID == good && r.Headers["n"] != "1" {
			t.Errorf("good row headers = %v", r.Headers)
		}
	}
	// The rows with non-canonical ids were failed by the claim itself, with
	// the reason, and the mover takes them.
	for _, id := range []string{upper, "not-a-uuid"} {
		var st, lastErr string
		if err := db.QueryRow(`SELECT status, coalesce(last_error, '') FROM txbox_outbox WHERE id = ?`, id).Scan(&st, &lastErr); err != nil {
			t.Fatal(err)
		}
		if st != store.StatusFailed || !strings.Contains(lastErr, "canonical") {
			t.Errorf("row %q: status %s, last error %q", id, st, lastErr)
		}
	}
	if n, err := b.d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 2 {
		t.Fatalf("move = %d, %v; want 2", n, err)
	}
	dls, err := b.d.DeadLetterList(ctx, &store.DeadLetterListParams{Limit: 10})
	if err != nil || len(dls) != 2 {
		t.Fatalf("listing dead letters with odd ids = %d, %v", len(dls), err)
	}
}

// TestVersion2TriggersRefuseUnreadableRows: after the upgrade the outbox
// refuses, at insert and update time, what the relay could not read back.
func TestVersion2TriggersRefuseUnreadableRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	db := b.d.DB()
	now := time.Now().UTC().Format(timeLayout)
	for _, c := range []struct{ id, headers, created string }{
		{txbox.NewID().String(), `[1, 2]`, now},
		{txbox.NewID().String(), `"s"`, now},
		{txbox.NewID().String(), `not json`, now},
		{txbox.NewID().String(), `{}`, "2026-01-01T00:00:00Z"},
		{strings.ToUpper(txbox.NewID().String()), `{}`, now},
		{"x", `{}`, now},
	} {
		if _, err := db.Exec(`INSERT INTO txbox_outbox (id, event_type, payload, headers, created_at) VALUES (?, 't', 'p', ?, ?)`, c.id, c.headers, c.created); err == nil {
			t.Errorf("row %+v accepted", c)
		}
	}
	id := txbox.NewID().String()
	if _, err := db.Exec(`INSERT INTO txbox_outbox (id, event_type, payload, headers) VALUES (?, 't', 'p', '{"a": 1}')`, id); err != nil {
		t.Fatalf("a good row was refused: %v", err)
	}
	if _, err := db.Exec(`UPDATE txbox_outbox SET headers = '[]' WHERE id = ?`, id); err == nil {
		t.Error("an update to non-object headers was accepted")
	}
	// The relay's own writes touch none of the checked columns: a claim
	// and a finish work as usual.
	rows := claim(t, b.d, "t", 10, time.Minute, false)
	if len(rows) != 1 || rows[0].Headers["a"] != "1" {
		t.Fatalf("claim = %+v", rows)
	}
	if res := finish(t, b.d, store.OutcomeAcked, 0, rows...); res.Finished != 1 {
		t.Fatalf("finish = %+v", res)
	}
}
