package config

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// TestFingerprinterMatchesTheRelay: the fingerprints txbox dlq computes
// from the configuration (Config.Fingerprinter) are those the relay built
// from it computes, for configured types, types that only Defaults cover,
// and a type whose sender does not resolve; otherwise a dead letter would
// land in a different group depending on who fingerprinted it.
func TestFingerprinterMatchesTheRelay(t *testing.T) {
	t.Parallel()
	yml := `database: { dialect: sqlite, dsn: ` + filepath.Join(t.TempDir(), "app.db") + ` }
senders:
  a: { type: webhook, url: "http://127.0.0.1:1/a" }
  b: { type: webhook, url: "http://127.0.0.1:1/b" }
defaults: { sender: a, max-attempts: 4, route: { url: "http://127.0.0.1:1/{event_type}" } }
events:
  orders: { sender: b, max-attempts: 2, route: { url: "http://127.0.0.1:1/orders-in" } }
  payments: {}
`
	c := sameFingerprints(t, yml, "orders", "payments", "unlisted")
	print := c.Fingerprinter()
	if f := print(&store.FingerprintInput{EventType: "orders", Attempts: 1, LastError: "x"}); f.Class != store.FailurePermanent || !strings.HasPrefix(f.Destination, "b ") || !strings.HasSuffix(f.Destination, " url=http://127.0.0.1:1/orders-in") {
		t.Errorf("orders after 1 of 2 attempts: %+v, want permanent to b's orders-in", f)
	}
	if f := print(&store.FingerprintInput{EventType: "payments", Attempts: 4, LastError: "x"}); f.Class != store.FailureAttemptsExhausted || !strings.HasPrefix(f.Destination, "a ") || !strings.HasSuffix(f.Destination, " url=http://127.0.0.1:1/payments") {
		t.Errorf("payments after 4 of 4 attempts: %+v, want exhausted to a's payments", f)
	}
	// One sender, no route and no events at all: the relay's default
	// route template.
	sameFingerprints(t, `database: { dialect: sqlite, dsn: `+filepath.Join(t.TempDir(), "one.db")+` }
senders:
  hook: { type: webhook, url: "http://127.0.0.1:1/a" }
defaults: { batch-size: 100 }
`, "grouped")
}

// sameFingerprints loads yml and checks that the fingerprints of the
// given types' dead letters are the same from the configuration as from
// the relay it builds.
func sameFingerprints(t *testing.T, yml string, types ...string) *Config {
	t.Helper()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	st := openMigrated(t, c, nil, log)
	senders, err := c.OpenSenders(context.Background(), nil, log)
	if err != nil {
		t.Fatal(err)
	}
	r, err := relay.New(c.RelayConfig(st, senders, log))
	if err != nil {
		t.Fatal(err)
	}
	fromConfig, fromRelay := c.Fingerprinter(), r.Fingerprinter()
	for _, typ := range types {
		for _, in := range []store.FingerprintInput{
			{EventType: typ, Attempts: 1, LastError: "HTTP 422 Unprocessable Entity: order 12 unknown"},
			{EventType: typ, Attempts: 4, LastError: "HTTP 500 Internal Server Error"},
			{EventType: typ, Attempts: 1, LastError: store.NotSentPrefix + "headers are not a JSON object"},
		} {
			a, b := fromConfig(&in), fromRelay(&in)
			if a != b {
				t.Errorf("%+v: config fingerprints %+v, relay %+v", in, a, b)
			}
			if a.Destination == "" {
				t.Errorf("%+v: no destination", in)
			}
		}
	}
	return c
}
