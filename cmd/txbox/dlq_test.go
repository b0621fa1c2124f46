package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
)

// deadLetters publishes n events of type typ into the SQLite database at
// path and drives them to the dead-letter table through the store API.
func deadLetters(t *testing.T, path, typ string, n int) []txbox.ID {
	t.Helper()
	ctx := context.Background()
	d, err := sqlite.Open(path, sqlite.Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*txbox.Event
	var ids []txbox.ID
	for i := 0; i < n; i++ {
		ev := &txbox.Event{ID: txbox.NewID(), Type: typ, Key: "k", Payload: []byte(`{"poison":true}`), Headers: map[string]string{"h": "v"}}
		evs = append(evs, ev)
		ids = append(ids, ev.ID)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: n, LeaseDuration: time.Minute})
	if err != nil || len(rows) != n {
		t.Fatalf("claim: %d rows, %v", len(rows), err)
	}
	var items []store.OutboxFinishItem
	for _, r := range rows {
		items = append(items, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeFailed, Error: "receiver said 422: bad poison"})
	}
	if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items}); err != nil {
		t.Fatal(err)
	}
	if moved, err := d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 100}); err != nil || moved != n {
		t.Fatalf("moved %d, %v", moved, err)
	}
	return ids
}

func TestStatusAndDLQ(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/dlq.db"
	ids := deadLetters(t, db, "poison-pill", 3)
	run := func(args ...string) (int, string, string) {
		return runInProcess(t, nil, append(args[:1:1], append([]string{"--dsn", db}, args[1:]...)...)...)
	}
	dlq := func(args ...string) (int, string, string) {
		return runInProcess(t, nil, append([]string{"dlq", args[0], "--dsn", db}, args[1:]...)...)
	}

	code, out, errOut := run("status")
	if code != exitOK || !strings.Contains(out, "dead letters: 3 unresolved, 0 resolved") {
		t.Fatalf("status: %d %q %q", code, out, errOut)
	}
	code, out, _ = dlq("list", "--type", "poison-pill")
	if code != exitOK || strings.Count(out, "poison-pill") != 3 || !strings.Contains(out, "receiver said 422") {
		t.Fatalf("list: %d %q", code, out)
	}
	code, out, _ = dlq("list", "--type", "other")
	if code != exitOK || strings.Contains(out, "poison-pill") {
		t.Fatalf("list with another type: %d %q", code, out)
	}
	code, out, _ = dlq("show", ids[0].String(), "--json")
	var shown struct {
		ID, Payload string
		Headers     map[string]string
	}
	if code != exitOK || json.Unmarshal([]byte(out), &shown) != nil || shown.ID != ids[0].String() || shown.Payload != `{"poison":true}` || shown.Headers["h"] != "v" {
		t.Fatalf("show: %d %q", code, out)
	}
	code, out, _ = dlq("retry", "--all", "--type", "poison-pill", "--dry-run")
	if code != exitOK || !strings.Contains(out, "would retry 3") {
		t.Fatalf("dry run: %d %q", code, out)
	}
	code, out, _ = dlq("resolve", ids[0].String())
	if code != exitOK || !strings.Contains(out, "resolved 1 of 1") {
		t.Fatalf("resolve: %d %q", code, out)
	}
	code, out, _ = dlq("retry", "--all", "--type", "poison-pill")
	if code != exitOK || !strings.Contains(out, "retried 2 of 2") {
		t.Fatalf("retry: %d %q", code, out)
	}
	code, out, _ = dlq("delete", "--all", "--status", "resolved")
	if code != exitOK || !strings.Contains(out, "deleted 1 of 1") {
		t.Fatalf("delete: %d %q", code, out)
	}
	code, out, _ = run("status", "--json")
	var st struct {
		Types []struct {
			EventType string `json:"event_type"`
			Pending   int64
		}
		DeadLetters struct{ Unresolved, Resolved int64 } `json:"dead_letters"`
	}
	if code != exitOK || json.Unmarshal([]byte(out), &st) != nil {
		t.Fatalf("status --json: %d %q", code, out)
	}
	if len(st.Types) != 1 || st.Types[0].EventType != "poison-pill" || st.Types[0].Pending != 2 || st.DeadLetters.Unresolved != 0 || st.DeadLetters.Resolved != 0 {
		t.Fatalf("after retry and delete: %+v", st)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"retry"}, "give ids or --all"},
		{[]string{"retry", "--all", ids[1].String()}, "give ids or --all"},
		{[]string{"show"}, "exactly one id"},
		{[]string{"show", "not-a-uuid"}, "invalid event id"},
		{[]string{"list", "--status", "maybe"}, "--status must be"},
	} {
		code, _, errOut := dlq(tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("dlq %v: %d %q, want 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
	if code, _, errOut := runInProcess(t, nil, "dlq", "purge"); code != exitUsage || !strings.Contains(errOut, "unknown dlq subcommand") {
		t.Errorf("dlq purge: %d %q", code, errOut)
	}
	if code, _, errOut := dlq("show", txbox.NewID().String()); code != exitFailure || !strings.Contains(errOut, "not found") {
		t.Errorf("show unknown id: %d %q", code, errOut)
	}
}
