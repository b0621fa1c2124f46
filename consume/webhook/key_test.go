package webhook_test

import (
	"net/http/httptest"
	"testing"

	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestKeyConformance: through the webhook sender and consume/webhook, in
// the headers and both CloudEvents formats, inbox.Message.Key is the key
// each event was published with (the txbox-key header, the ce-subject
// header or the subject of the JSON envelope), and "" for an event
// without one (consumetest.RunKeyRoundTrip).
func TestKeyConformance(t *testing.T) {
	t.Parallel()
	for _, format := range []sender.Format{sender.FormatTxbox, sender.FormatCloudEvents, sender.FormatCloudEventsStructured} {
		t.Run(string(format), func(t *testing.T) {
			t.Parallel()
			p := consumetest.NewPipeline(t, "webhook-key")
			check := p.Keys()
			h, err := cwebhook.New(cwebhook.Config{Inbox: p.Inbox, Handler: check.Handler, Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			snd, err := webhook.New(webhook.Config{Secret: secret, ContentType: "application/json"})
			if err != nil {
				t.Fatal(err)
			}
			p.RunKeyRoundTrip(t, snd, sender.Route{URL: srv.URL, Format: format}, check, nil)
		})
	}
}
