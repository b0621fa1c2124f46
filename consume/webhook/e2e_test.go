package webhook_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestEndToEnd runs the end-to-end scenario (consumetest.RunEndToEnd)
// through signed webhook POSTs to consume/webhook behind a test server;
// the events delivered again by hand are POSTed anew.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	p := consumetest.NewPipeline(t, "webhook-e2e")
	h, err := cwebhook.New(cwebhook.Config{Inbox: p.Inbox, Handler: p.Handler, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	snd, err := webhook.New(webhook.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	p.RunEndToEnd(t, consumetest.EndToEnd{
		Sender: snd,
		Route:  sender.Route{URL: srv.URL + "/events/{event_type}"},
		Redeliver: func(ids []txbox.ID) {
			for _, id := range ids {
				body := `{"again":true}`
				req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
				req.Header.Set(txbox.HeaderEventID, id.String())
				req.Header.Set("Txbox-Signature", webhook.Sign(secret, time.Now(), []byte(body)))
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK {
					t.Fatalf("redelivery by hand: status %d", resp.StatusCode)
				}
			}
		},
	})
}
