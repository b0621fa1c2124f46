package main

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestConfigCheckFanoutRoutes: a fanned-out type shows one row per route,
// each with its own sender, destination and settings (not the defaults
// route the type would have without routes); the destinations table lists
// each route's destination, --connect checks each like any other, and the
// notes say what becomes of a removed route's pending rows.
func TestConfigCheckFanoutRoutes(t *testing.T) {
	t.Parallel()
	db := t.TempDir() + "/t.db"
	if code, _, errOut := runInProcess(t, nil, "migrate", "--dsn", db); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	kc, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	hook := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hook.Close()
	p := t.TempDir() + "/txbox.yaml"
	y := fmt.Sprintf(`
database: { dialect: sqlite, dsn: %q }
defaults: { sender: nats, route: { subject: "ev.{event_type}" } }
senders:
  kafka: { type: kafka, brokers: [%s] }
  partner: { type: webhook }
  nats: { type: nats, url: "nats://127.0.0.1:1" }
events:
  order-created:
    batch-size: 70
    routes:
      - { sender: kafka, topic: orders }
      - { sender: kafka, name: audit, topic: orders-audit, max-attempts: 3 }
      - { sender: partner, url: "%s/hook", max-attempts: 10 }
  single:
    routes:
      - { sender: kafka, topic: single-topic }
`, db, kc.ListenAddrs()[0], hook.URL)
	if err := os.WriteFile(p, []byte(y), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runInProcess(t, nil, "config", "check", "--config", p)
	if code != exitOK {
		t.Fatalf("check: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		{"order-created", "(fan-out: 3 routes)"},
		{"order-created → kafka", "kafka", "topic orders", "70", "4", "none"},
		{"order-created → audit", "kafka", "topic orders-audit", "70", "3"},
		{"order-created → partner", "partner", "url " + hook.URL + "/hook", "lease", "70", "10"},
		// A one-entry list is the type's single route: no fan-out.
		{"single", "kafka", "topic single-topic", "lease", "200"},
		{"topic orders ", "kafka", "order-created → kafka", "not checked"},
		{"removed from the configuration"},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}
	if lineOf(out, "order-created", "ev.order-created") != "" || lineOf(out, "single", "(fan-out") != "" {
		t.Errorf("a route shown with the defaults route, or a single route as a fan-out:\n%s", out)
	}

	code, out, errOut = runInProcess(t, nil, "config", "check", "--config", p, "--connect", "--timeout", "5s")
	if code != exitFailure || !strings.Contains(errOut, "2 destination(s) missing") {
		t.Fatalf("check --connect: code %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range [][]string{
		{"topic orders ", "order-created → kafka", "ok: exists"},
		{"topic orders-audit", "order-created → audit", "MISSING"},
		{"topic single-topic", "single", "MISSING"},
		{"url " + hook.URL + "/hook", "order-created → partner", "ok"},
	} {
		if lineOf(out, want...) == "" {
			t.Errorf("no line with %q in:\n%s", want, out)
		}
	}
}
