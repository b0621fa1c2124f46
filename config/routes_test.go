package config

import (
	"slices"
	"strings"
	"testing"

	"github.com/txbox/txbox"
)

// fanoutYAML fans order-created out to three senders; refund-created has
// a routes list of one entry, its single route.
const fanoutYAML = `
database: { dialect: postgres, dsn: "postgres://u@h/db" }
defaults: { sender: nats, route: { subject: "ev.{event_type}" }, max-attempts: 5 }
senders:
  kafka: { type: kafka, brokers: ["127.0.0.1:1"] }
  partner: { type: webhook }
  nats: { type: nats, url: "nats://127.0.0.1:4222" }
events:
  order-created:
    batch-size: 50
    routes:
      - { sender: kafka, topic: orders }
      - { sender: partner, url: "https://partner.example/hook?token=s3cret", max-attempts: 10 }
      - { sender: nats, subject: "wh.{event_type}", ordering: key, name: wh }
  refund-created:
    routes:
      - { sender: kafka, topic: refunds, batch-size: 7 }
`

func TestRoutesResolveEachRoute(t *testing.T) {
	c, err := Load(Source{YAML: []byte(fanoutYAML)})
	if err != nil {
		t.Fatal(err)
	}
	got := c.Routes("order-created")
	want := []RouteView{
		{Name: "kafka", Sender: "kafka", Destination: "topic=orders", Claim: txbox.ClaimLock, BatchSize: 50, MaxAttempts: 5, Ordering: txbox.OrderingNone, InFlight: 4},
		{Name: "partner", Sender: "partner", Claim: txbox.ClaimLease, BatchSize: 50, MaxAttempts: 10, Ordering: txbox.OrderingNone, InFlight: 4},
		{Name: "wh", Sender: "nats", Destination: "subject=wh.order-created", Claim: txbox.ClaimLock, BatchSize: 50, MaxAttempts: 5, Ordering: txbox.OrderingKey, InFlight: 4},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d routes, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g := got[i]
		g.Route = want[i].Route
		if i == 1 {
			// The webhook URL is redacted in Destination, whole in Route.
			if got[i].Route.URL != "https://partner.example/hook?token=s3cret" || g.Destination == "" || strings.Contains(g.Destination, "s3cret") {
				t.Errorf("route 1: destination %q, url %q", g.Destination, got[i].Route.URL)
			}
			g.Destination = ""
		}
		if g != want[i] {
			t.Errorf("route %d:\n got %+v\nwant %+v", i, g, want[i])
		}
	}
	for _, typ := range []string{"refund-created", "not-listed"} {
		if r := c.Routes(typ); r != nil {
			t.Errorf("Routes(%q) = %+v, want nil (no fan-out)", typ, r)
		}
	}
	// A one-entry list is the type's single route, in Effective as in
	// the relay: its sender, its destination alone, its settings.
	eff := c.Effective("refund-created")
	if *eff.Sender != "kafka" || eff.Route.Topic != "refunds" || eff.Route.Subject != "" || *eff.BatchSize != 7 ||
		*eff.MaxAttempts != 5 || *eff.Claim != txbox.ClaimLock || eff.Routes != nil {
		t.Errorf("Effective(refund-created) = sender %q route %+v batch %d attempts %d claim %s routes %v",
			*eff.Sender, *eff.Route, *eff.BatchSize, *eff.MaxAttempts, *eff.Claim, eff.Routes)
	}
	// The relay chooses each route's claim for its sender: the file
	// sets none, so RelayConfig leaves it unset for the fanned-out type.
	rc := c.RelayConfig(nil, nil, nil)
	if r := rc.Events["refund-created"]; r.BatchSize == nil || *r.BatchSize != 7 || r.Routes != nil || r.Route.Topic != "refunds" {
		t.Errorf("RelayConfig: refund-created = %+v, want its single route's batch size 7 and topic", r)
	}
	if cl := rc.Events["order-created"].Claim; cl != nil {
		t.Errorf("RelayConfig: order-created claim %s, want unset", *cl)
	}
}

// TestSettingsShowEachRoute: config print's settings of a fanned-out type
// are the type's keys (without the route no route reads) and each route's
// name and keys, with the route's effective values and their sources.
func TestSettingsShowEachRoute(t *testing.T) {
	c, err := Load(Source{Name: "f.yaml", YAML: []byte(fanoutYAML)})
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Setting{}
	for _, s := range c.Settings() {
		got[s.Path] = s
	}
	for path, want := range map[string][2]string{
		"events.order-created.routes[0].name":         {"kafka", "default (the route's sender)"},
		"events.order-created.routes[0].topic":        {"orders", "file f.yaml:"},
		"events.order-created.routes[0].batch-size":   {"50", "inherited from events.order-created.batch-size (file f.yaml:"},
		"events.order-created.routes[1].max-attempts": {"10", "file f.yaml:"},
		"events.order-created.routes[1].claim":        {"lease", "default (by the route's sender)"},
		"events.order-created.routes[2].name":         {"wh", "file f.yaml:"},
		"events.order-created.routes[2].subject":      {"wh.{event_type}", "file f.yaml:"},
		"events.order-created.routes[2].ordering":     {"key", "file f.yaml:"},
		"events.refund-created.route.topic":           {"refunds", "file f.yaml:"},
		"events.refund-created.batch-size":            {"7", "file f.yaml:"},
	} {
		s, ok := got[path]
		if !ok || s.Value != want[0] || !strings.HasPrefix(s.Source, want[1]) {
			t.Errorf("%s = %q from %q (present %v), want %q from %q…", path, s.Value, s.Source, ok, want[0], want[1])
		}
	}
	for _, absent := range []string{"events.order-created.route.subject", "events.order-created.routes", "events.order-created.routes[0].subject"} {
		if s, ok := got[absent]; ok {
			t.Errorf("%s shown: %+v", absent, s)
		}
	}
}

// TestSecretsOfRoutes: a fan-out route's webhook URL token is scrubbed
// from the logs as a type's route's is.
func TestSecretsOfRoutes(t *testing.T) {
	y := strings.Replace(fanoutYAML, "token=s3cret", "token=route-secret-77", 1)
	c, err := Load(Source{YAML: []byte(y)})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(c.Secrets(func(string) string { return "" }), "route-secret-77") {
		t.Errorf("the route's URL token is not among the secrets: %q", c.Secrets(func(string) string { return "" }))
	}
}
