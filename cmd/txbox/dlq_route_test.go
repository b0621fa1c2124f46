package main

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
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

// routedDeadLetters makes, in the SQLite database at path, one event of
// "fan" fanned out to kafka and hook whose hook row is dead-lettered, a
// second whose kafka row is, and one dead letter of the single-route
// type "plain". It returns the ids of the three dead letters.
func routedDeadLetters(t *testing.T, path string) (hook, kafka, plain txbox.ID) {
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
	routes := []string{"kafka", "hook"}
	fail := func(typ, route string, id txbox.ID) {
		t.Helper()
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Route: route, Limit: 10, LeaseDuration: time.Hour})
		i := slices.IndexFunc(rows, func(r *store.OutboxRow) bool { return r.ID == id })
		if err != nil || i < 0 {
			t.Fatalf("claim of %s route %q: %v, %v", typ, route, rows, err)
		}
		if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
			{ID: id, LeaseToken: rows[i].LeaseToken, Outcome: store.OutcomeFailed, Error: "refused on " + route}}}); err != nil {
			t.Fatal(err)
		}
		if n, err := d.DeadLetterMove(ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 1 {
			t.Fatalf("move: %d, %v", n, err)
		}
	}
	publish := func(typ string) txbox.ID {
		t.Helper()
		ev := &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: []byte(`{}`)}
		tx, err := d.DB().BeginTx(ctx, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}}); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(); err != nil {
			t.Fatal(err)
		}
		if typ == "fan" {
			if n, err := d.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: typ, Routes: routes, Limit: 10}); err != nil || n != 1 {
				t.Fatalf("expand: %d, %v", n, err)
			}
		}
		return ev.ID
	}
	first, second := publish("fan"), publish("fan")
	hook, kafka = store.RouteRowID(first, 1), store.RouteRowID(second, 0)
	fail("fan", "hook", hook)
	fail("fan", "kafka", kafka)
	plain = publish("plain")
	fail("plain", "", plain)
	return hook, kafka, plain
}

// TestDLQRouteFilter: --route keeps one fan-out route's dead letters in
// dlq list and in retry --all (a filter: no --yes needed), and the audit
// entry names it; a bad route name and --route on parked are usage
// errors.
func TestDLQRouteFilter(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/route.db"
	hook, kafka, plain := routedDeadLetters(t, db)
	dlq := func(args ...string) (int, string, string) {
		return runInProcess(t, []string{"USER=env-user"}, append([]string{"dlq", args[0], "--dsn", db}, args[1:]...)...)
	}
	listed := func(args ...string) []string {
		t.Helper()
		code, out, errOut := dlq(append([]string{"list", "--json"}, args...)...)
		var items []struct{ ID string }
		if code != exitOK || json.Unmarshal([]byte(out), &items) != nil {
			t.Fatalf("list %v: %d %q %q", args, code, out, errOut)
		}
		var ids []string
		for _, it := range items {
			ids = append(ids, it.ID)
		}
		return ids
	}
	for _, c := range []struct {
		args []string
		want []txbox.ID
	}{
		{nil, []txbox.ID{plain, kafka, hook}},
		{[]string{"--route", "hook"}, []txbox.ID{hook}},
		{[]string{"--type", "fan", "--route", "kafka"}, []txbox.ID{kafka}},
		{[]string{"--route", "nats"}, nil},
		{[]string{"--type", "plain", "--route", "hook"}, nil},
	} {
		var want []string
		for _, id := range c.want {
			want = append(want, id.String())
		}
		if got := listed(c.args...); !slices.Equal(got, want) {
			t.Errorf("list %v = %v, want %v", c.args, got, want)
		}
	}
	if code, out, errOut := dlq("retry", "--all", "--route", "hook"); code != exitOK || !strings.Contains(out, "retried 1 of 1") {
		t.Fatalf("retry --all --route hook: %d %q %q", code, out, errOut)
	}
	if got := listed(); !slices.Equal(got, []string{plain.String(), kafka.String()}) {
		t.Errorf("after the hook retry: %v", got)
	}
	code, out, _ := dlq("audit", "--json")
	var entries []auditJSON
	if code != exitOK || json.Unmarshal([]byte(out), &entries) != nil || len(entries) != 1 ||
		entries[0].Filter != `{"status":"unresolved","route":"hook"}` || entries[0].Selector != "filter" {
		t.Errorf("audit: %d %q", code, out)
	}
	for _, args := range [][]string{
		{"list", "--route", "a b"},
		{"retry", "--all", "--route", strings.Repeat("r", 65)},
		{"parked", "--route", "hook"},
	} {
		if code, _, errOut := dlq(args...); code != exitUsage || !strings.Contains(errOut, "--route") && !strings.Contains(errOut, "parked takes") {
			t.Errorf("dlq %v: %d %q, want a usage error", args, code, errOut)
		}
	}
}
