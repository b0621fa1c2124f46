package sqlite

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// TestExpandFailsUnreadableRows: rows written by plain SQL before schema
// version 2 that the outbox triggers would refuse in a copy (headers not
// an object, a created_at in another form, an id not canonical) fail with
// the reason when their type is expanded, instead of failing every
// expansion of the type; their neighbours are expanded.
func TestExpandFailsUnreadableRows(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	db := b.d.DB()
	var triggers []string
	for _, trig := range []string{"txbox_outbox_check_insert", "txbox_outbox_check_update"} {
		var sqlText string
		if err := db.QueryRow(`SELECT sql FROM sqlite_schema WHERE name = ?`, trig).Scan(&sqlText); err != nil {
			t.Fatal(err)
		}
		triggers = append(triggers, sqlText)
		if _, err := db.Exec(`DROP TRIGGER ` + trig); err != nil {
			t.Fatal(err)
		}
	}
	insert := func(id, headers, created string) {
		t.Helper()
		if _, err := db.Exec(`INSERT INTO txbox_outbox (id, event_type, payload, headers, created_at) VALUES (?, 'fan', 'p', ?, ?)`,
			id, headers, created); err != nil {
			t.Fatal(err)
		}
	}
	now := time.Now().UTC().Format(timeLayout)
	good, array, late := txbox.NewID(), txbox.NewID(), txbox.NewID()
	insert(array.String(), `[1]`, now)
	insert(late.String(), `{}`, "yesterday")
	insert("not-a-uuid", `{}`, now)
	insert(good.String(), `{}`, now)
	for _, sqlText := range triggers {
		if _, err := db.Exec(sqlText); err != nil {
			t.Fatal(err)
		}
	}
	n, err := b.d.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: "fan", Routes: []string{"a", "b"}, Limit: 10})
	if err != nil || n != 1 {
		t.Fatalf("expand: %d, %v; want the one readable row", n, err)
	}
	rows, err := db.Query(`SELECT id, status, coalesce(last_error, '') FROM txbox_outbox WHERE route = '' ORDER BY rowid`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	failed := 0
	for rows.Next() {
		var id, status, lastErr string
		if err := rows.Scan(&id, &status, &lastErr); err != nil {
			t.Fatal(err)
		}
		if status != store.StatusFailed || !strings.HasPrefix(lastErr, store.NotSentPrefix) {
			t.Errorf("row %s: %s %q, want FAILED with the reason", id, status, lastErr)
		}
		failed++
	}
	if failed != 3 {
		t.Fatalf("%d rows failed, want 3", failed)
	}
	for _, route := range []string{"a", "b"} {
		got, err := b.d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "fan", Route: route, Limit: 10, LeaseDuration: time.Minute})
		if err != nil || len(got) != 1 || got[0].Event() != good {
			t.Fatalf("route %s: %+v, %v; want the readable row", route, got, err)
		}
	}
}
