package admin_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/admin"
	"github.com/txbox/txbox/store"
)

// routeDeadLetter publishes one event of typ, expands it to routes, fails
// its row of routes[fail] for good and moves it to the dead letters. It
// returns that dead letter's id.
func (b *bundle) routeDeadLetter(typ string, routes []string, fail int, msg string) txbox.ID {
	b.t.Helper()
	ev := &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: []byte("{}")}
	b.publish(ev)
	x, ok := b.store.(store.Expander)
	if !ok {
		b.t.Fatalf("the %s store does not fan out", b.store.Dialect())
	}
	if n, err := x.OutboxExpand(b.ctx, &store.OutboxExpandParams{EventType: typ, Routes: routes, Limit: 10}); err != nil || n != 1 {
		b.t.Fatalf("expand: %d, %v", n, err)
	}
	// The route's rows of earlier events may be pending too: claim them
	// all, fail this event's and leave the others in process.
	rows, err := b.store.OutboxClaim(b.ctx, &store.OutboxClaimParams{EventType: typ, Route: routes[fail], Limit: 10, LeaseDuration: time.Hour})
	id := store.RouteRowID(ev.ID, fail)
	i := slices.IndexFunc(rows, func(r *store.OutboxRow) bool { return r.ID == id })
	if err != nil || i < 0 {
		b.t.Fatalf("claim of route %s: %v, %v", routes[fail], rows, err)
	}
	if _, err := b.store.OutboxFinish(b.ctx, &store.OutboxFinishParams{Items: []store.OutboxFinishItem{
		{ID: id, LeaseToken: rows[i].LeaseToken, Outcome: store.OutcomeFailed, Error: msg}}}); err != nil {
		b.t.Fatal(err)
	}
	if n, err := b.store.DeadLetterMove(b.ctx, &store.DeadLetterMoveParams{Limit: 10}); err != nil || n != 1 {
		b.t.Fatalf("move: %d, %v", n, err)
	}
	return id
}

// TestDeadLetterRouteFilter: ?route= (and "route" in a bulk action's
// filter) keeps one fan-out route's dead letters in the listing, the
// count and the bulk actions; without it every route's and the
// single-route types' are listed; the audit line and the audit trail
// name it.
func TestDeadLetterRouteFilter(t *testing.T) {
	t.Parallel()
	for name, h := range dialects() {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, h, nil)
			routes := []string{"kafka", "hook"}
			hook := b.routeDeadLetter("fan", routes, 1, "422 hook")
			kafka := b.routeDeadLetter("fan", routes, 0, "kafka refused")
			plain := b.deadLetter("plain", "", []byte("x"), "boom")

			list := func(q string) []string {
				t.Helper()
				var page admin.DeadLetterPage
				b.getJSON("/api/v1/dead-letters"+q, &page)
				var out []string
				for _, it := range page.Items {
					out = append(out, it.ID)
				}
				return out
			}
			for q, want := range map[string][]string{
				"":                         {plain.String(), kafka.String(), hook.String()},
				"?route=hook":              {hook.String()},
				"?type=fan&route=kafka":    {kafka.String()},
				"?route=nats":              nil,
				"?type=plain&route=hook":   nil,
				"?route=hook&limit=1":      {hook.String()},
				"?route=kafka&error=KAFKA": {kafka.String()},
			} {
				if got := list(q); strings.Join(got, ",") != strings.Join(want, ",") {
					t.Errorf("list %s = %v, want %v", q, got, want)
				}
			}
			var count struct{ Count int64 }
			b.getJSON("/api/v1/dead-letters/count?route=hook", &count)
			if count.Count != 1 {
				t.Fatalf("count of route hook = %d, want 1", count.Count)
			}

			var res admin.BulkResult
			b.post("/api/v1/dead-letters/retry", `{"filter":{"route":"hook"},"dry_run":true}`, 200, &res)
			if res.Matched != 1 || res.Changed != 1 || res.Selector != "filter" || res.IDs[0] != hook.String() {
				t.Fatalf("dry retry of route hook: %+v", res)
			}
			b.post("/api/v1/dead-letters/retry", `{"filter":{"type":"fan","route":"hook"}}`, 200, &res)
			if res.Matched != 1 || res.Changed != 1 {
				t.Fatalf("retry of route hook: %+v", res)
			}
			if got := list(""); strings.Join(got, ",") != plain.String()+","+kafka.String() {
				t.Fatalf("after the retry of route hook: %v", got)
			}
			if !strings.Contains(b.logs.String(), "filter.type=fan filter.route=hook") {
				t.Errorf("audit line lacks the route:\n%s", b.logs)
			}
			var page admin.AuditPage
			b.getJSON("/api/v1/audit?action=retry&limit=1", &page)
			if len(page.Entries) != 1 || page.Entries[0].Filter != `{"type":"fan","route":"hook"}` {
				t.Errorf("audit trail: %+v", page.Entries)
			}
		})
	}
}
