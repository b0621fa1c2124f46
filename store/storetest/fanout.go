package storetest

import (
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// ExerciseFanout runs the fan-out suite (store.Expander, route claims) against
// the dialect behind h, whose drivers must implement store.Expander. Every
// subtest runs in parallel in its own namespace.
func ExerciseFanout(t *testing.T, h Harness) {
	t.Helper()
	tests := []struct {
		name string
		fn   func(*testing.T, *env, store.Expander)
	}{
		{"ExpandOneRowPerRoute", testExpandRows},
		{"ExpandRoutesIndependent", testExpandIndependent},
		{"ExpandOrderedPerRoute", testExpandOrdered},
		{"ExpandOldDeadLetterParksEveryRoute", testExpandOldDeadLetter},
		{"ExpandRouteIDTaken", testExpandIDTaken},
		{"ExpandConcurrent", testExpandConcurrent},
		{"DropRoute", testDropRoute},
		{"ExpandLockClaim", testExpandLock},
		{"SplitOnlyUnackedRoutes", testSplitUnacked},
		{"SplitSkipsTakenRows", testSplitSkips},
		{"SplitRouteIDTaken", testSplitIDTaken},
		{"SplitBadParams", testSplitBadParams},
		{"SplitRetain", testSplitRetain},
		{"DeadLetterFilterRoute", testDeadLetterFilterRoute},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			e := setup(t, h)
			x, ok := e.d.(store.Expander)
			if !ok {
				t.Fatalf("%s driver does not implement store.Expander", e.d.Dialect())
			}
			tc.fn(t, e, x)
		})
	}
}

var threeRoutes = []string{"kafka", "hook", "nats"}

func (e *env) expand(x store.Expander, typ string, routes []string, limit int) int {
	e.t.Helper()
	n, err := x.OutboxExpand(e.ctx, &store.OutboxExpandParams{EventType: typ, Routes: routes, Limit: limit})
	if err != nil {
		e.t.Fatalf("expand %s: %v", typ, err)
	}
	return n
}

func (e *env) claimRoute(typ, route string, limit int, ordered bool) []*store.OutboxRow {
	e.t.Helper()
	return e.claimP(store.OutboxClaimParams{EventType: typ, Route: route, Limit: limit, LeaseDuration: longLease, OrderedByKey: ordered})
}

func testExpandRows(t *testing.T, e *env, x store.Expander) {
	evs := events("fan", 3)
	evs[1].Key = "k"
	e.publish(evs...)
	e.publish(event("single"))
	if n := e.expand(x, "fan", threeRoutes, 100); n != 3 {
		t.Fatalf("expanded %d events, want 3", n)
	}
	if n := e.expand(x, "fan", threeRoutes, 100); n != 0 {
		t.Fatalf("second expansion expanded %d events, want 0", n)
	}
	if rows := e.claimRoute("fan", "", 10, false); len(rows) != 0 {
		t.Fatalf("route \"\" of an expanded type: claimed %v", ids(rows))
	}
	if rows := e.claimRoute("single", "kafka", 10, false); len(rows) != 0 {
		t.Fatalf("route kafka of a type with no routes: claimed %v", ids(rows))
	}
	byID := map[txbox.ID]*txbox.Event{}
	for _, ev := range evs {
		byID[ev.ID] = ev
	}
	for i, route := range threeRoutes {
		rows := e.claimRoute("fan", route, 10, false)
		if len(rows) != 3 {
			t.Fatalf("route %s: claimed %d rows, want 3", route, len(rows))
		}
		for _, r := range rows {
			ev := byID[r.Event()]
			if ev == nil {
				t.Fatalf("route %s: row %s has event id %s, not a published event", route, r.ID, r.Event())
			}
			if r.Route != route || r.ID != store.RouteRowID(ev.ID, i) || r.Key != ev.Key || string(r.Payload) != string(ev.Payload) || r.Headers["h"] != "v" {
				t.Fatalf("route %s: row %+v does not copy event %+v as route %d", route, r, ev, i)
			}
			if (i == 0) != (r.EventID == txbox.ID{}) {
				t.Fatalf("route %s (index %d): EventID %s", route, i, r.EventID)
			}
		}
	}
	if rows := e.claim("single", 10, longLease); len(rows) != 1 || rows[0].Route != "" {
		t.Fatalf("a type with no routes is claimed with route \"\": got %+v", rows)
	}
}

func testExpandIndependent(t *testing.T, e *env, x store.Expander) {
	ev := event("fan")
	e.publish(ev)
	e.expand(x, "fan", threeRoutes, 10)
	e.finishAll(e.claimRoute("fan", "kafka", 10, false), store.OutcomeAcked, 0, "")
	e.finishAll(e.claimRoute("fan", "hook", 10, false), store.OutcomeFailed, 0, "422 no")
	if n := e.moveAll(); n != 1 {
		t.Fatalf("moved %d dead letters, want 1 (the hook route's)", n)
	}
	hookID := store.RouteRowID(ev.ID, 1)
	dl, err := e.d.DeadLetterGet(e.ctx, hookID)
	if err != nil {
		t.Fatalf("dead letter of the hook route: %v", err)
	}
	if dl.Route != "hook" || dl.EventID != ev.ID {
		t.Fatalf("dead letter route=%q event=%s, want hook and %s", dl.Route, dl.EventID, ev.ID)
	}
	// The NATS route is untouched by the others' outcomes.
	if rows := e.claimRoute("fan", "nats", 10, false); len(rows) != 1 || rows[0].Event() != ev.ID {
		t.Fatalf("nats route: %+v", rows)
	}
	if n, err := e.d.DeadLetterRetry(e.ctx, []txbox.ID{hookID}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	rows := e.claimRoute("fan", "hook", 10, false)
	if len(rows) != 1 || rows[0].ID != hookID || rows[0].Event() != ev.ID || rows[0].Route != "hook" {
		t.Fatalf("retried hook row: %+v", rows)
	}
	if rows := e.claimRoute("fan", "kafka", 10, false); len(rows) != 0 {
		t.Fatalf("the retry re-sent to kafka too: %v", ids(rows))
	}
}

// testExpandOrdered: per-key order and parking hold per route.
func testExpandOrdered(t *testing.T, e *env, x store.Expander) {
	e0, e1 := keyed("fan", "k"), keyed("fan", "k")
	e.publish(e0)
	e.publish(e1)
	e.expand(x, "fan", threeRoutes, 10)
	// kafka's head is e0; hook's e0 fails for good and parks hook's key.
	if rows := e.claimRoute("fan", "kafka", 10, true); len(rows) != 1 || rows[0].Event() != e0.ID {
		t.Fatalf("kafka's first ordered claim: %+v", rows)
	}
	hook := e.claimRoute("fan", "hook", 10, true)
	if len(hook) != 1 || hook[0].Event() != e0.ID {
		t.Fatalf("hook's first ordered claim: %+v", hook)
	}
	e.finishAll(hook, store.OutcomeFailed, 0, "gone")
	e.moveAll()
	if rows := e.claimRoute("fan", "hook", 10, true); len(rows) != 0 {
		t.Fatalf("hook's key is parked by its dead letter, yet claimed %v", ids(rows))
	}
	nats := e.claimRoute("fan", "nats", 10, true)
	if len(nats) != 1 || nats[0].Event() != e0.ID {
		t.Fatalf("nats's first ordered claim (hook's dead letter must not park it): %+v", nats)
	}
	e.finishAll(nats, store.OutcomeAcked, 0, "")
	if rows := e.claimRoute("fan", "nats", 10, true); len(rows) != 1 || rows[0].Event() != e1.ID {
		t.Fatalf("nats's second ordered claim: %+v", rows)
	}
}

// testExpandOldDeadLetter: a dead letter from before the type had routes
// parks every route's key, and once retried its expansion goes first.
func testExpandOldDeadLetter(t *testing.T, e *env, x store.Expander) {
	old := e.deadLetter("fan", "k", "before routes")
	e1 := keyed("fan", "k")
	e.publish(e1)
	e.expand(x, "fan", threeRoutes, 10)
	if rows := e.claimRoute("fan", "kafka", 10, true); len(rows) != 0 {
		t.Fatalf("a route-less dead letter of the key must park kafka's key; claimed %v", ids(rows))
	}
	if n, err := e.d.DeadLetterRetry(e.ctx, []txbox.ID{old}); err != nil || n != 1 {
		t.Fatalf("retry: %d, %v", n, err)
	}
	if h := e.h.WaitHorizon; h != nil {
		h(t, e.d)
	}
	if rows := e.claimRoute("fan", "kafka", 10, true); len(rows) != 0 {
		t.Fatalf("an unexpanded earlier row of the key must hold kafka's key; claimed %v", ids(rows))
	}
	if n := e.expand(x, "fan", threeRoutes, 10); n != 1 {
		t.Fatalf("expanded %d, want the retried event", n)
	}
	// A retried dead letter takes its place in its key again, except on
	// SQLite, whose key order is the rowid: a retry is inserted anew and
	// goes behind the rows it parked (docs/concepts.md, "Ordering").
	first, second := old, e1.ID
	if e.d.Dialect() == "sqlite" {
		first, second = e1.ID, old
	}
	rows := e.claimRoute("fan", "kafka", 10, true)
	if len(rows) != 1 || rows[0].Event() != first {
		t.Fatalf("kafka's head after expansion: %+v, want %s", rows, first)
	}
	e.finishAll(rows, store.OutcomeAcked, 0, "")
	if rows := e.claimRoute("fan", "kafka", 10, true); len(rows) != 1 || rows[0].Event() != second {
		t.Fatalf("kafka's next: %+v, want %s", rows, second)
	}
}

func testExpandIDTaken(t *testing.T, e *env, x store.Expander) {
	a := event("fan")
	b := event("other")
	b.ID = store.RouteRowID(a.ID, 1)
	c := event("fan")
	e.publish(a, b, c)
	if n := e.expand(x, "fan", threeRoutes, 10); n != 1 {
		t.Fatalf("expanded %d, want 1 (c; a's hook id is b's)", n)
	}
	if s := e.stats("fan"); s.Failed != 1 {
		t.Fatalf("fan stats %+v: want a failed", s)
	}
	e.moveAll()
	dl, err := e.d.DeadLetterGet(e.ctx, a.ID)
	if err != nil {
		t.Fatalf("a's dead letter: %v", err)
	}
	if !strings.HasPrefix(dl.LastError, store.NotSentPrefix) || !strings.Contains(dl.LastError, "taken") {
		t.Fatalf("a's last error %q", dl.LastError)
	}
	if rows := e.claim("other", 10, longLease); len(rows) != 1 || rows[0].ID != b.ID {
		t.Fatalf("b must be untouched: %+v", rows)
	}
	if rows := e.claimRoute("fan", "hook", 10, false); len(rows) != 1 || rows[0].Event() != c.ID {
		t.Fatalf("hook: %+v, want c alone", rows)
	}
}

func testExpandConcurrent(t *testing.T, e *env, x store.Expander) {
	const n = 200
	e.publish(events("fan", n)...)
	var mu sync.Mutex
	total := 0
	together(t, 4, func(int) error {
		for {
			got, err := x.OutboxExpand(e.ctx, &store.OutboxExpandParams{EventType: "fan", Routes: threeRoutes, Limit: 7})
			if err != nil {
				return err
			}
			if got == 0 {
				return nil
			}
			mu.Lock()
			total += got
			mu.Unlock()
		}
	})
	if left := e.expand(x, "fan", threeRoutes, 1000); total+left != n {
		t.Fatalf("expanded %d concurrently and %d after, want %d in all", total, left, n)
	}
	for _, route := range threeRoutes {
		rows := e.claimRoute("fan", route, 1000, false)
		seen := map[txbox.ID]bool{}
		for _, r := range rows {
			seen[r.Event()] = true
		}
		if len(rows) != n || len(seen) != n {
			t.Fatalf("route %s: %d rows of %d events, want %d of %d", route, len(rows), len(seen), n, n)
		}
	}
}

func testDropRoute(t *testing.T, e *env, x store.Expander) {
	e.publish(events("fan", 5)...)
	e.publish(events("plain", 2)...)
	e.expand(x, "fan", threeRoutes, 10)
	routes, err := x.OutboxPendingRoutes(e.ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []store.TypeRoute{{EventType: "fan", Route: "hook", Pending: 5}, {EventType: "fan", Route: "kafka", Pending: 5}, {EventType: "fan", Route: "nats", Pending: 5}}
	slices.SortFunc(routes, func(a, b store.TypeRoute) int {
		return strings.Compare(a.EventType+" "+a.Route, b.EventType+" "+b.Route)
	})
	if !slices.Equal(routes, want) {
		t.Fatalf("pending routes %+v, want %+v", routes, want)
	}
	reason := store.NotSentPrefix + "route hook was removed"
	n, err := x.OutboxDropRoute(e.ctx, &store.OutboxDropRouteParams{EventType: "fan", Route: "hook", Reason: reason, Limit: 3})
	if err != nil || n != 3 {
		t.Fatalf("drop: %d, %v; want 3 (the limit)", n, err)
	}
	n, err = x.OutboxDropRoute(e.ctx, &store.OutboxDropRouteParams{EventType: "fan", Route: "hook", Reason: reason, Limit: 10})
	if err != nil || n != 2 {
		t.Fatalf("second drop: %d, %v; want 2", n, err)
	}
	if moved := e.moveAll(); moved != 5 {
		t.Fatalf("moved %d dead letters, want the 5 dropped", moved)
	}
	dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Filter: store.DeadLetterFilter{EventType: "fan"}, Limit: 10})
	if err != nil || len(dls) != 5 {
		t.Fatalf("dead letters: %d, %v", len(dls), err)
	}
	for _, dl := range dls {
		if dl.Route != "hook" || dl.LastError != reason {
			t.Fatalf("dead letter %+v: want route hook and the reason", dl)
		}
	}
	if rows := e.claimRoute("fan", "kafka", 10, false); len(rows) != 5 {
		t.Fatalf("kafka keeps its 5, got %d", len(rows))
	}
	if rows := e.claim("plain", 10, longLease); len(rows) != 2 {
		t.Fatalf("plain keeps its 2, got %d", len(rows))
	}
}

func testExpandLock(t *testing.T, e *env, x store.Expander) {
	l, ok := e.d.(store.OutboxLocker)
	if !ok {
		t.Skipf("%s has no lock claim", e.d.Dialect())
	}
	e.publish(events("fan", 4)...)
	e.expand(x, "fan", threeRoutes, 10)
	b := e.lock(l, store.OutboxClaimParams{EventType: "fan", Route: "nats", Limit: 10})
	rows := lockedRows(b)
	if len(rows) != 4 {
		t.Fatalf("lock claim of nats: %d rows, want 4", len(rows))
	}
	for _, r := range rows {
		if r.Route != "nats" || r.EventID == (txbox.ID{}) {
			t.Fatalf("lock claim row %+v", r)
		}
	}
	if got := e.claimRoute("fan", "kafka", 10, false); len(got) != 4 {
		t.Fatalf("kafka beside a locked nats batch: %d rows, want 4", len(got))
	}
}
