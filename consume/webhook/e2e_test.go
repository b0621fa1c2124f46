package webhook_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/internal/consumetest"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestEndToEnd: business transactions (some rolled back) → outbox → relay
// → signed webhook POSTs → consume/webhook → inbox → handler writing an
// effect row in the same PostgreSQL transaction. The relay is stopped
// abruptly half way and a second one takes over after the lease; a slice
// of events is POSTed again by hand. Every committed event has exactly one
// effect.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	p := consumetest.NewPipeline(t, "webhook-e2e")
	h, err := cwebhook.New(cwebhook.Config{Inbox: p.Inbox, Handler: p.Handler, Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	n := consumetest.E2EEvents()
	const perTx = 10
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)

	snd, err := webhook.New(webhook.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	route := sender.Route{URL: srv.URL + "/events/{event_type}"}
	stop1 := p.StartRelay(t, snd, route, 2*time.Second)
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)
	stop1(time.Millisecond)
	p.StartRelay(t, snd, route, 2*time.Second)

	committed := p.Committed()
	for _, id := range committed[:len(committed)/10] {
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
	p.WaitDelivered(t, consumetest.E2ETimeout())
}
