package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txbox/txbox/store"
)

// TestDLQShowsRoutes: txbox dlq list has a ROUTE column when a dead
// letter is a fan-out route's, and its JSON and dlq show carry route and
// event_id; a single-route type's dead letters show neither.
func TestDLQShowsRoutes(t *testing.T) {
	event := uuid.New()
	plain := &store.DeadLetter{ID: uuid.New(), EventType: "plain", FailedAt: time.Now(), Status: store.DeadLetterUnresolved, LastError: "boom"}
	routed := &store.DeadLetter{ID: store.RouteRowID(event, 1), EventType: "fan", Route: "partner", EventID: event,
		FailedAt: time.Now(), Status: store.DeadLetterUnresolved, LastError: "boom"}

	var b strings.Builder
	e := &env{stdout: &b}
	if err := printDeadLetters(e, []*store.DeadLetter{plain}, false); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(b.String(), "ROUTE") {
		t.Errorf("a ROUTE column without routes:\n%s", b.String())
	}
	b.Reset()
	if err := printDeadLetters(e, []*store.DeadLetter{plain, routed}, false); err != nil {
		t.Fatal(err)
	}
	if lineOf(b.String(), "TYPE", "ROUTE", "KEY") == "" || lineOf(b.String(), routed.ID.String(), "fan", "partner", "boom") == "" {
		t.Errorf("no route column:\n%s", b.String())
	}
	b.Reset()
	if err := printDeadLetters(e, []*store.DeadLetter{plain, routed}, true); err != nil {
		t.Fatal(err)
	}
	var items []map[string]any
	if err := json.Unmarshal([]byte(b.String()), &items); err != nil {
		t.Fatal(err)
	}
	if _, ok := items[0]["route"]; ok || items[1]["route"] != "partner" || items[1]["event_id"] != event.String() {
		t.Errorf("JSON: %v", items)
	}
	b.Reset()
	if err := printDeadLetter(e, routed, false, false); err != nil {
		t.Fatal(err)
	}
	if lineOf(b.String(), "route:", "partner") == "" || lineOf(b.String(), "event id:", event.String()) == "" {
		t.Errorf("dlq show:\n%s", b.String())
	}
}
