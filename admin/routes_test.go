package admin

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// TestDeadLetterJSONRouteAndEventID: a fan-out route's dead letter shows
// its route and, for a second or further route's copy, the event's id;
// a single-route type's shows neither key.
func TestDeadLetterJSONRouteAndEventID(t *testing.T) {
	event := uuid.New()
	for _, tc := range []struct {
		name       string
		dl         store.DeadLetter
		route, eid string
	}{
		{"single route", store.DeadLetter{ID: uuid.New(), EventType: "a"}, "", ""},
		{"first route", store.DeadLetter{ID: event, EventType: "a", Route: "kafka"}, "kafka", ""},
		{"second route", store.DeadLetter{ID: store.RouteRowID(event, 1), EventType: "a", Route: "partner", EventID: event}, "partner", event.String()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.dl.Status, tc.dl.CreatedAt, tc.dl.FailedAt = store.DeadLetterUnresolved, time.Now(), time.Now()
			b, err := json.Marshal(view(&tc.dl, 16))
			if err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(b, &m); err != nil {
				t.Fatal(err)
			}
			for key, want := range map[string]string{"route": tc.route, "event_id": tc.eid} {
				got, present := m[key]
				if want == "" && present || want != "" && got != want {
					t.Errorf("%s: %s = %v (present %v), want %q:\n%s", tc.name, key, got, present, want, b)
				}
			}
		})
	}
}

type routesHealth struct{ h relay.Health }

func (r routesHealth) Health() relay.Health { return r.h }

// TestOverviewRoutes: a fanned-out type's overview entry lists its routes
// in their configured order, each with its settings and its own poller
// (not the type's last route's poller as the type's), a route only the
// relay knows too; a single-route type keeps its polling and no routes.
func TestOverviewRoutes(t *testing.T) {
	h := &Handler{cfg: Config{Routes: func(t string) []RouteView {
		if t != "order-created" {
			return nil
		}
		return []RouteView{
			{Name: "kafka", Sender: "kafka", Destination: "topic=orders", Claim: "lock", BatchSize: 200, MaxAttempts: 4, Ordering: "none"},
			{Name: "partner", Sender: "partner", Destination: "url=https://partner.example/hook", Claim: "lease", BatchSize: 200, MaxAttempts: 10, Ordering: "none"},
		}
	}}}
	health := &relay.Health{Types: []relay.TypeHealth{
		{EventType: "order-created", Route: "kafka", Sender: "kafka", Destination: "orders", Delay: time.Second},
		{EventType: "order-created", Route: "partner", Sender: "partner", Destination: "partner.example", InFlight: 2},
		{EventType: "order-created", Route: "old", Sender: "nats", Destination: "x"},
		{EventType: "user-created", Sender: "nats", Destination: "ev.user-created"},
	}, Circuits: []relay.CircuitHealth{{Sender: "partner", Destination: "partner.example", State: txbox.CircuitOpen}}}
	views := h.typeViews([]*store.OutboxTypeDetail{{EventType: "order-created", Due: 3}}, health)
	if len(views) != 2 || views[0].EventType != "order-created" || views[1].EventType != "user-created" {
		t.Fatalf("views: %+v", views)
	}
	oc := views[0]
	if oc.Polling != nil || oc.Due != 3 || len(oc.Routes) != 3 {
		t.Fatalf("order-created: polling %+v, due %d, routes %+v", oc.Polling, oc.Due, oc.Routes)
	}
	for i, want := range []struct {
		name, claim, circuit string
		attempts, inFlight   int
	}{{"kafka", "lock", "closed", 4, 0}, {"partner", "lease", "open", 10, 2}, {"old", "", "closed", 0, 0}} {
		r := oc.Routes[i]
		if r.Name != want.name || r.Claim != want.claim || r.MaxAttempts != want.attempts || r.Polling == nil ||
			r.Polling.Circuit != want.circuit || r.Polling.InFlight != want.inFlight {
			t.Errorf("route %d = %+v (polling %+v), want %+v", i, r, r.Polling, want)
		}
	}
	if uc := views[1]; uc.Polling == nil || uc.Routes != nil {
		t.Errorf("user-created: polling %+v, routes %+v", uc.Polling, uc.Routes)
	}
	b, _ := json.Marshal(views)
	if !strings.Contains(string(b), `"routes":[{"name":"kafka","sender":"kafka","destination":"topic=orders","claim":"lock"`) {
		t.Errorf("JSON: %s", b)
	}
}
