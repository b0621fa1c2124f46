package storetest

import (
	"bytes"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// The OutboxSplit part of ExerciseFanout: a relay's shared claim sends a
// row of route "" to every route, releases it and splits it so that only
// the routes that did not acknowledge it get a row.

func (e *env) split(x store.Expander, typ string, rows ...store.SplitRow) int {
	e.t.Helper()
	n, err := x.OutboxSplit(e.ctx, &store.OutboxSplitParams{EventType: typ, Routes: threeRoutes, Rows: rows})
	if err != nil {
		e.t.Fatalf("split %s: %v", typ, err)
	}
	return n
}

// claimReleased claims want's rows with route "", as the shared claim
// does, and releases them: PENDING again, route "", due now.
func (e *env) claimReleased(typ string, want ...*txbox.Event) {
	e.t.Helper()
	rows := e.claimRoute(typ, "", 100, false)
	if len(rows) != len(want) {
		e.t.Fatalf("claim of route \"\": %d rows, want %d", len(rows), len(want))
	}
	e.finishAll(rows, store.OutcomeReleased, 0, "")
}

// routeIDs claims every row of route and returns their ids, sorted,
// after checking that each copies its event (byID) as route index i.
func (e *env) routeIDs(typ string, i int, byID map[txbox.ID]*txbox.Event) []txbox.ID {
	e.t.Helper()
	route := threeRoutes[i]
	var out []txbox.ID
	for _, r := range e.claimRoute(typ, route, 100, false) {
		ev := byID[r.Event()]
		if ev == nil || r.ID != store.RouteRowID(ev.ID, i) || r.Route != route || r.Attempts != 0 ||
			string(r.Payload) != string(ev.Payload) || r.Headers["h"] != "v" || r.Key != ev.Key {
			e.t.Fatalf("route %s: row %+v is not a copy of its event as route %d", route, r, i)
		}
		out = append(out, r.ID)
	}
	slices.SortFunc(out, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

func sorted(ids ...txbox.ID) []txbox.ID {
	out := slices.Clone(ids)
	slices.SortFunc(out, func(a, b txbox.ID) int { return bytes.Compare(a[:], b[:]) })
	return out
}

// testSplitUnacked: only the routes whose bit is clear get a row; the own
// row keeps route 0's place or goes.
func testSplitUnacked(t *testing.T, e *env, x store.Expander) {
	evs := events("fan", 3)
	evs[1].Key = "k"
	e.publish(evs...)
	e.claimReleased("fan", evs...)
	a, b, c := evs[0], evs[1], evs[2]
	n := e.split(x, "fan", store.SplitRow{ID: a.ID, Done: 0b010}, store.SplitRow{ID: b.ID, Done: 0b001}, store.SplitRow{ID: c.ID, Done: 0b111})
	if n != 3 {
		t.Fatalf("split %d rows, want 3", n)
	}
	if n := e.split(x, "fan", store.SplitRow{ID: a.ID}, store.SplitRow{ID: b.ID}, store.SplitRow{ID: c.ID}); n != 0 {
		t.Fatalf("second split: %d rows, want 0 (none has route \"\" any more)", n)
	}
	if s := e.stats("fan"); s.Pending != 4 || s.InProcess != 0 || s.Failed != 0 {
		t.Fatalf("stats %+v, want 4 pending: a's kafka and nats, b's hook and nats", s)
	}
	if rows := e.claimRoute("fan", "", 10, false); len(rows) != 0 {
		t.Fatalf("route \"\" after the split: %v", ids(rows))
	}
	byID := map[txbox.ID]*txbox.Event{a.ID: a, b.ID: b, c.ID: c}
	want := [][]txbox.ID{
		{a.ID},
		{store.RouteRowID(b.ID, 1)},
		sorted(store.RouteRowID(a.ID, 2), store.RouteRowID(b.ID, 2)),
	}
	for i, route := range threeRoutes {
		if got := e.routeIDs("fan", i, byID); !slices.Equal(got, want[i]) {
			t.Fatalf("route %s: rows %v, want %v", route, got, want[i])
		}
	}
}

// testSplitSkips: rows that are not PENDING with route "" of the type, or
// are not there, are left alone.
func testSplitSkips(t *testing.T, e *env, x store.Expander) {
	expanded := event("fan")
	e.publish(expanded)
	e.expand(x, "fan", threeRoutes, 10)
	held := event("fan")
	other := event("other")
	e.publish(held, other)
	if rows := e.claimRoute("fan", "", 10, false); len(rows) != 1 || rows[0].ID != held.ID {
		t.Fatalf("claim of route \"\": %v, want [%s]", ids(rows), held.ID)
	}
	n := e.split(x, "fan", store.SplitRow{ID: expanded.ID}, store.SplitRow{ID: held.ID, Done: 0b001},
		store.SplitRow{ID: other.ID, Done: 0b001}, store.SplitRow{ID: txbox.NewID()})
	if n != 0 {
		t.Fatalf("split %d rows, want 0", n)
	}
	if s := e.stats("fan"); s.Pending != 3 || s.InProcess != 1 {
		t.Fatalf("fan stats %+v, want the 3 expanded rows pending and the claimed one in process", s)
	}
	byID := map[txbox.ID]*txbox.Event{expanded.ID: expanded}
	for i, route := range threeRoutes {
		if got := e.routeIDs("fan", i, byID); !slices.Equal(got, []txbox.ID{store.RouteRowID(expanded.ID, i)}) {
			t.Fatalf("route %s: rows %v, want the expanded event's", route, got)
		}
	}
	if rows := e.claim("other", 10, longLease); len(rows) != 1 || rows[0].ID != other.ID || rows[0].Route != "" {
		t.Fatalf("a row of another type must be untouched: %+v", rows)
	}
}

// testSplitIDTaken: a row one of whose needed route ids is taken fails
// and stays, even when route 0 acknowledged it; a taken id of a route
// that acknowledged the row does not matter.
func testSplitIDTaken(t *testing.T, e *env, x store.Expander) {
	a, c, d := event("fan"), event("fan"), event("fan")
	b := event("other")
	b.ID = store.RouteRowID(a.ID, 1)
	b2 := event("other")
	b2.ID = store.RouteRowID(d.ID, 1)
	e.publish(a, b, b2, c, d)
	e.claimReleased("fan", a, c, d)
	n := e.split(x, "fan", store.SplitRow{ID: a.ID, Done: 0b001}, store.SplitRow{ID: c.ID, Done: 0b001}, store.SplitRow{ID: d.ID, Done: 0b011})
	if n != 2 {
		t.Fatalf("split %d rows, want 2 (c and d; a's hook id is b's)", n)
	}
	if s := e.stats("fan"); s.Failed != 1 || s.Pending != 3 {
		t.Fatalf("fan stats %+v: want a failed, c's hook and nats and d's nats pending", s)
	}
	if moved := e.moveAll(); moved != 1 {
		t.Fatalf("moved %d dead letters, want a", moved)
	}
	dl, err := e.d.DeadLetterGet(e.ctx, a.ID)
	if err != nil {
		t.Fatalf("a's dead letter: %v", err)
	}
	if !strings.HasPrefix(dl.LastError, store.NotSentPrefix) || !strings.Contains(dl.LastError, "taken") || dl.Route != "" || dl.Attempts != 1 {
		t.Fatalf("a's dead letter route=%q attempts=%d last error %q", dl.Route, dl.Attempts, dl.LastError)
	}
	byID := map[txbox.ID]*txbox.Event{c.ID: c, d.ID: d}
	want := [][]txbox.ID{nil, {store.RouteRowID(c.ID, 1)}, sorted(store.RouteRowID(c.ID, 2), store.RouteRowID(d.ID, 2))}
	for i, route := range threeRoutes {
		if got := e.routeIDs("fan", i, byID); !slices.Equal(got, want[i]) {
			t.Fatalf("route %s: rows %v, want %v", route, got, want[i])
		}
	}
	if rows := e.claim("other", 10, longLease); !slices.Equal(sorted(ids(rows)...), sorted(b.ID, b2.ID)) {
		t.Fatalf("b and b2 must be untouched: %v", ids(rows))
	}
}

// testSplitBadParams: params that Validate refuses match
// store.ErrInvalidParams and change nothing.
func testSplitBadParams(t *testing.T, e *env, x store.Expander) {
	ev := event("fan")
	e.publish(ev)
	e.claimReleased("fan", ev)
	row := store.SplitRow{ID: ev.ID, Done: 0b001}
	tooMany := make([]store.SplitRow, store.MaxSplitRows+1)
	for i := range tooMany {
		tooMany[i].ID = txbox.NewID()
	}
	for name, p := range map[string]*store.OutboxSplitParams{
		"nil":                 nil,
		"no rows":             {EventType: "fan", Routes: threeRoutes},
		"too many rows":       {EventType: "fan", Routes: threeRoutes, Rows: tooMany},
		"an id twice":         {EventType: "fan", Routes: threeRoutes, Rows: []store.SplitRow{row, {ID: ev.ID}}},
		"done beyond routes":  {EventType: "fan", Routes: threeRoutes, Rows: []store.SplitRow{{ID: ev.ID, Done: 0b1000}}},
		"one route":           {EventType: "fan", Routes: threeRoutes[:1], Rows: []store.SplitRow{{ID: ev.ID}}},
		"routes not distinct": {EventType: "fan", Routes: []string{"kafka", "kafka"}, Rows: []store.SplitRow{{ID: ev.ID}}},
	} {
		if n, err := x.OutboxSplit(e.ctx, p); !errors.Is(err, store.ErrInvalidParams) || n != 0 {
			t.Errorf("split with %s: %d, %v; want an error matching store.ErrInvalidParams", name, n, err)
		}
	}
	if rows := e.claimRoute("fan", "", 10, false); len(rows) != 1 || rows[0].ID != ev.ID {
		t.Fatalf("the row after refused splits: %v, want it unchanged", ids(rows))
	}
}

// testSplitRetain: with Retain (a type that keeps delivered rows) a row
// whose route 0 acknowledged it stays, PROCESSED, as route 0's row, where
// cleanup finds it, rather than being deleted.
func testSplitRetain(t *testing.T, e *env, x store.Expander) {
	evs := events("fan", 2)
	e.publish(evs...)
	e.claimReleased("fan", evs...)
	n, err := x.OutboxSplit(e.ctx, &store.OutboxSplitParams{EventType: "fan", Routes: threeRoutes, Retain: true,
		Rows: []store.SplitRow{{ID: evs[0].ID, Done: 0b001}, {ID: evs[1].ID, Done: 0b111}}})
	if err != nil || n != 2 {
		t.Fatalf("split: %d, %v; want 2", n, err)
	}
	if s := e.stats("fan"); s.Pending != 2 || s.InProcess != 0 || s.Failed != 0 {
		t.Fatalf("stats %+v, want 2 pending: the first event's hook and nats rows", s)
	}
	byID := map[txbox.ID]*txbox.Event{evs[0].ID: evs[0], evs[1].ID: evs[1]}
	if got := e.routeIDs("fan", 1, byID); !slices.Equal(got, []txbox.ID{store.RouteRowID(evs[0].ID, 1)}) {
		t.Fatalf("route hook rows %v, want the first event's", got)
	}
	// Cleanup takes rows processed before now; on a millisecond clock
	// "now" may still be their processed_at for a moment.
	cleaned := 0
	deadline := time.Now().Add(5 * time.Second)
	for cleaned < 2 && time.Now().Before(deadline) {
		n, err := e.d.OutboxCleanup(e.ctx, &store.CleanupParams{OlderThan: 0, Limit: 100})
		if err != nil {
			t.Fatalf("cleanup: %v", err)
		}
		cleaned += n
	}
	if cleaned != 2 {
		t.Fatalf("cleanup of processed rows: %d, want the 2 retained rows", cleaned)
	}
}
