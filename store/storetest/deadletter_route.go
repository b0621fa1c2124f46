package storetest

import (
	"errors"
	"slices"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// routeDeadLetters makes the dead letters of testDeadLetterFilterRoute:
// two events of "fan" (keys k1, k2) expanded to threeRoutes, acked on
// kafka, failed on hook (both) and on nats the first (the second acked), and one dead
// letter of the single-route type "plain" (key k1, empty route). It returns
// the ids of the hook, nats and plain dead letters.
func routeDeadLetters(t *testing.T, e *env, x store.Expander) (hook, nats []txbox.ID, plain txbox.ID) {
	t.Helper()
	evs := events("fan", 2)
	evs[0].Key, evs[1].Key = "k1", "k2"
	e.publish(evs...)
	e.expand(x, "fan", threeRoutes, 10)
	e.finishAll(e.claimRoute("fan", "kafka", 10, false), store.OutcomeAcked, 0, "")
	e.finishAll(e.claimRoute("fan", "hook", 10, false), store.OutcomeFailed, 0, "422 hook")
	natsRows := e.claimRoute("fan", "nats", 10, false)
	for _, r := range natsRows {
		if r.Event() == evs[0].ID {
			e.finishAll([]*store.OutboxRow{r}, store.OutcomeFailed, 0, "nats refused")
		} else {
			e.finishAll([]*store.OutboxRow{r}, store.OutcomeAcked, 0, "")
		}
	}
	if len(natsRows) != len(evs) {
		t.Fatalf("nats route claimed %v, want a row per event", ids(natsRows))
	}
	if n := e.moveAll(); n != 3 {
		t.Fatalf("moved %d dead letters, want 3 (two hook, one nats)", n)
	}
	for _, ev := range evs {
		hook = append(hook, store.RouteRowID(ev.ID, 1))
	}
	nats = []txbox.ID{store.RouteRowID(evs[0].ID, 2)}
	plain = e.deadLetter("plain", "k1", "boom")
	return hook, nats, plain
}

// walkIDs lists the ids f selects with store.DeadLetterWalk a page of one
// at a time, so that every page after the first runs with the filter and
// a cursor.
func (e *env) walkIDs(f store.DeadLetterFilter) []txbox.ID {
	e.t.Helper()
	var out []txbox.ID
	_, err := store.DeadLetterWalk(e.ctx, e.d, &store.DeadLetterWalkParams{Filter: f, PageSize: 1}, func(page []store.DeadLetterEntry) error {
		for _, en := range page {
			out = append(out, en.ID)
		}
		return nil
	})
	if err != nil {
		e.t.Fatalf("walk %+v: %v", f, err)
	}
	return out
}

// testDeadLetterFilterRoute: DeadLetterFilter.Route keeps one route's
// dead letters in listings, counts and walks (the bulk actions' reads),
// on its own and with the other fields; empty keeps every route and the
// single-route types' dead letters; names compare case-sensitively; a
// name that is not a route name is ErrInvalidParams. A retry of what the
// walk of one route found moves that route's dead letters only.
func testDeadLetterFilterRoute(t *testing.T, e *env, x store.Expander) {
	hook, nats, plain := routeDeadLetters(t, e, x)
	all := append(append(slices.Clone(hook), nats...), plain)
	for _, c := range []struct {
		f    store.DeadLetterFilter
		want []txbox.ID
	}{
		{store.DeadLetterFilter{}, all},
		{store.DeadLetterFilter{Route: "hook"}, hook},
		{store.DeadLetterFilter{Route: "nats"}, nats},
		{store.DeadLetterFilter{Route: "kafka"}, nil},
		{store.DeadLetterFilter{Route: "HOOK"}, nil},
		{store.DeadLetterFilter{EventType: "fan"}, append(slices.Clone(hook), nats...)},
		{store.DeadLetterFilter{EventType: "fan", Route: "hook", Key: "k1"}, hook[:1]},
		{store.DeadLetterFilter{Route: "hook", ErrorContains: "422", Status: store.DeadLetterUnresolved}, hook},
		{store.DeadLetterFilter{Route: "hook", Status: store.DeadLetterResolved}, nil},
		{store.DeadLetterFilter{Route: "nats", IDs: hook}, nil},
		{store.DeadLetterFilter{EventType: "plain"}, []txbox.ID{plain}},
		{store.DeadLetterFilter{EventType: "plain", Route: "hook"}, nil},
		{store.DeadLetterFilter{Key: "k1"}, []txbox.ID{hook[0], nats[0], plain}},
	} {
		dls, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Filter: c.f, Limit: 100})
		if err != nil {
			t.Fatalf("list %+v: %v", c.f, err)
		}
		var got []txbox.ID
		for _, dl := range dls {
			got = append(got, dl.ID)
			if c.f.Route != "" && dl.Route != c.f.Route {
				t.Errorf("list %+v: dead letter %s has route %q", c.f, dl.ID, dl.Route)
			}
		}
		if !sameIDs(got, c.want) {
			t.Errorf("list %+v = %v, want %v", c.f, got, c.want)
		}
		if n, err := e.d.DeadLetterCount(e.ctx, &c.f); err != nil || n != int64(len(c.want)) {
			t.Errorf("count %+v = %d, %v; want %d", c.f, n, err, len(c.want))
		}
		if got := e.walkIDs(c.f); !sameIDs(got, c.want) {
			t.Errorf("walk %+v = %v, want %v", c.f, got, c.want)
		}
	}
	for _, bad := range []string{"hook route", "x'--", string(make([]byte, 65))} {
		f := store.DeadLetterFilter{Route: bad}
		if _, err := e.d.DeadLetterCount(e.ctx, &f); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("count with route %q: %v, want ErrInvalidParams", bad, err)
		}
		if _, err := e.d.DeadLetterList(e.ctx, &store.DeadLetterListParams{Filter: f, Limit: 1}); !errors.Is(err, store.ErrInvalidParams) {
			t.Errorf("list with route %q: %v, want ErrInvalidParams", bad, err)
		}
	}
	testRetryByRoute(t, e, hook, nats, plain)
}

// testRetryByRoute retries what the walk of the hook route finds: the
// hook route claims both events again; the nats and plain dead letters
// stay.
func testRetryByRoute(t *testing.T, e *env, hook, nats []txbox.ID, plain txbox.ID) {
	t.Helper()
	found := e.walkIDs(store.DeadLetterFilter{EventType: "fan", Route: "hook"})
	if n, err := e.d.DeadLetterRetry(e.ctx, found); err != nil || n != len(hook) {
		t.Fatalf("retry of the hook route's dead letters: n=%d err=%v, want %d", n, err, len(hook))
	}
	if got := e.walkIDs(store.DeadLetterFilter{}); !sameIDs(got, append(slices.Clone(nats), plain)) {
		t.Fatalf("dead letters after the hook retry = %v, want %v and %s", got, nats, plain)
	}
	if n, err := e.d.DeadLetterCount(e.ctx, &store.DeadLetterFilter{Route: "hook"}); err != nil || n != 0 {
		t.Fatalf("hook count after the retry = %d, %v; want 0", n, err)
	}
	if rows := e.claimRoute("fan", "hook", 10, false); !sameIDs(ids(rows), hook) {
		t.Fatalf("hook route claimed %v after the retry, want %v", ids(rows), hook)
	}
	for _, r := range []string{"kafka", "nats"} {
		if rows := e.claimRoute("fan", r, 10, false); len(rows) != 0 {
			t.Fatalf("route %s claimed %v after the hook retry", r, ids(rows))
		}
	}
}
