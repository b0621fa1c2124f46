package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/store"
)

const statusFanoutYAML = `
database: { dialect: sqlite, dsn: %q }
defaults: { sender: nats, route: { subject: "ev.{event_type}" } }
senders:
  kafka: { type: kafka, brokers: ["127.0.0.1:1"] }
  partner: { type: webhook }
  nats: { type: nats, url: "nats://127.0.0.1:4222" }
events:
  order-created:
    routes:
      - { sender: kafka, topic: orders }
      - { sender: partner, url: "https://partner.example/hook", max-attempts: 10 }
  plain: {}
`

// TestStatusShowsRoutes: txbox status lists each route of a fanned-out
// type from the configuration, in the table and in --json.
func TestStatusShowsRoutes(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/t.db"
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	p := t.TempDir() + "/txbox.yaml"
	if err := os.WriteFile(p, fmt.Appendf(nil, statusFanoutYAML, db), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, nil, "status", "--config", p)
	if code != exitOK {
		t.Fatalf("status: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		{"EVENT TYPE", "ROUTE", "DESTINATION", "PENDING"},
		{"order-created", "kafka", "topic=orders"},
		{"order-created", "partner", "url=https://partner.example/hook", "10"},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}
	if lineOf(out, "plain") != "" {
		t.Errorf("a type with one route in the routes table:\n%s", out)
	}
	code, out, errOut = runInProcess(t, nil, "status", "--config", p, "--json")
	if code != exitOK {
		t.Fatalf("status --json: code %d\n%s\n%s", code, out, errOut)
	}
	var got struct {
		Routes []map[string]any `json:"routes"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Routes) != 2 || got.Routes[0]["event_type"] != "order-created" || got.Routes[0]["name"] != "kafka" ||
		got.Routes[1]["max_attempts"] != 10.0 || got.Routes[1]["sender"] != "partner" {
		t.Errorf("status --json routes: %v", got.Routes)
	}
}

// pendingRoutes is a store.Expander that reports pending rows per route.
type pendingRoutes struct {
	store.Driver
	pending []store.TypeRoute
}

func (p *pendingRoutes) OutboxExpand(context.Context, *store.OutboxExpandParams) (int, error) {
	return 0, nil
}

func (p *pendingRoutes) OutboxSplit(context.Context, *store.OutboxSplitParams) (int, error) {
	return 0, nil
}

func (p *pendingRoutes) OutboxPendingRoutes(context.Context) ([]store.TypeRoute, error) {
	return p.pending, nil
}

func (p *pendingRoutes) OutboxDropRoute(context.Context, *store.OutboxDropRouteParams) (int, error) {
	return 0, nil
}

// TestStatusRoutesPendingAndRemoved: with a store that counts pending rows
// per route, each configured route shows its count (0 when none), and a
// route with pending rows that the configuration no longer has is shown
// as removed, its rows to be dead-lettered by the relay.
func TestStatusRoutesPendingAndRemoved(t *testing.T) {
	cfg, err := config.Load(config.Source{YAML: fmt.Appendf(nil, statusFanoutYAML, "x.db")})
	if err != nil {
		t.Fatal(err)
	}
	d := &pendingRoutes{pending: []store.TypeRoute{
		{EventType: "order-created", Route: "partner", Pending: 7},
		{EventType: "order-created", Route: "old", Pending: 3},
	}}
	routes, err := statusRoutes(context.Background(), cfg, d)
	if err != nil {
		t.Fatal(err)
	}
	if len(routes) != 3 || *routes[0].Pending != 0 || *routes[1].Pending != 7 || !routes[2].Removed || *routes[2].Pending != 3 {
		t.Fatalf("routes: %+v", routes)
	}
	var b strings.Builder
	e := &env{stdout: &b}
	if err := printStatusRoutes(e, routes, nil); err != nil {
		t.Fatal(err)
	}
	if lineOf(b.String(), "order-created", "old", "removed", "dead-letters", "3") == "" {
		t.Errorf("no removed route line in:\n%s", b.String())
	}
}
