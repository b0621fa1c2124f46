package postgres_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/storeharness"
	"github.com/txbox/txbox/store"
)

// TestRouteRunStopsAtUnexpandedRow: on a route, a key's row not expanded
// yet (route "") holds back the route's rows after it in the key's order,
// not the ones before it: an ordered claim with long runs takes the
// route's head and stops before the unexpanded event; once that is
// expanded its route row comes next, and a later expanded row after it.
func TestRouteRunStopsAtUnexpandedRow(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d := storeharness.PostgresDriver(t)
	routes := []string{"kafka", "hook"}
	publish := func() txbox.ID {
		t.Helper()
		ev := &txbox.Event{ID: txbox.NewID(), Type: "fan", Key: "k", Payload: []byte("p")}
		if err := pgx.BeginFunc(ctx, d.Pool(), func(tx pgx.Tx) error {
			return d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}})
		}); err != nil {
			t.Fatal(err)
		}
		return ev.ID
	}
	expand := func(limit int) int {
		t.Helper()
		n, err := d.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: "fan", Routes: routes, Limit: limit})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	claim := func(route string) []*store.OutboxRow {
		t.Helper()
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "fan", Route: route, Limit: 10, KeyRun: 10,
			LeaseDuration: time.Minute, OrderedByKey: true, HorizonOff: true})
		if err != nil {
			t.Fatal(err)
		}
		return rows
	}
	e0 := publish()
	expand(10)
	e1 := publish() // stays unexpanded for now
	if rows := claim("hook"); len(rows) != 1 || rows[0].Event() != e0 || rows[0].ID != store.RouteRowID(e0, 1) {
		t.Fatalf("hook's run: %+v, want e0's row alone (e1 is not expanded)", rows)
	}
	if n := expand(10); n != 1 {
		t.Fatalf("expanded %d, want e1", n)
	}
	e2 := publish()
	expand(10)
	// kafka: e0, e1, e2 in one run now that every one has its row.
	rows := claim("kafka")
	if len(rows) != 3 || rows[0].ID != e0 || rows[1].ID != e1 || rows[2].ID != e2 {
		t.Fatalf("kafka's run: %v, want e0, e1, e2", ids(rows))
	}
	// hook: e0 is in flight, so nothing.
	if rows := claim("hook"); len(rows) != 0 {
		t.Fatalf("hook with its head in flight: %v", ids(rows))
	}
	routesNow, err := d.OutboxPendingRoutes(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(routesNow) != 1 || routesNow[0] != (store.TypeRoute{EventType: "fan", Route: "hook", Pending: 2}) {
		t.Fatalf("pending routes %+v, want hook with 2", routesNow)
	}
}
