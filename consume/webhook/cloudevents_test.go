package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/consumetest"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestCloudEventsRoundTrip: outbox → relay → webhook sender in each
// CloudEvents mode → consume/webhook → inbox. Every committed event has
// exactly one effect, its inbox id, type and key taken from the id, type
// and subject attributes (ce- headers in binary mode, the JSON envelope in
// structured mode); copies posted by hand with the attributes only (no
// Idempotency-Key, no txbox-event-id) are recognised as duplicates.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	for _, format := range []sender.Format{sender.FormatCloudEvents, sender.FormatCloudEventsStructured} {
		t.Run(string(format), func(t *testing.T) {
			t.Parallel()
			p := consumetest.NewPipeline(t, "webhook-ce")
			check := p.CloudEvents(consume.PrefixHTTP)
			h, err := cwebhook.New(cwebhook.Config{Inbox: p.Inbox, Handler: check.Handler, Secret: secret})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			p.Publish(t, "order-created", 20, 5, 4)

			snd, err := webhook.New(webhook.Config{Secret: secret, ContentType: "application/json",
				CloudEvents: sender.CloudEvents{Format: format, Source: "/orders"}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = snd.Close(context.Background()) })
			p.StartRelay(t, snd, sender.Route{URL: srv.URL}, 2*time.Second)
			p.WaitDelivered(t, consumetest.E2ETimeout())
			check.Copies(t, func(id txbox.ID) { postCopy(t, srv.URL, format, id) })
		})
	}
}

// postCopy posts a signed copy of event id in format, with the
// CloudEvents attributes only.
func postCopy(t *testing.T, url string, format sender.Format, id txbox.ID) {
	t.Helper()
	body := []byte(`{"copy":true}`)
	headers := map[string]string{"Content-Type": "application/json"}
	if format == sender.FormatCloudEventsStructured {
		body = fmt.Appendf(nil, `{"specversion":"1.0","id":%q,"source":"/elsewhere","type":"order-created","data":{"copy":true}}`, id)
		headers["Content-Type"] = consume.MediaTypeStructured
	} else {
		for k, v := range map[string]string{"ce-specversion": "1.0", "ce-id": id.String(), "ce-source": "/elsewhere", "ce-type": "order-created"} {
			headers[k] = v
		}
	}
	req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	req.Header.Set(webhook.DefaultSignatureHeader, webhook.Sign(secret, time.Now(), body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("copy of %s: status %d", id, resp.StatusCode)
	}
}

// TestCloudEventsPercentDecoding: the HTTP binding percent-encodes
// attribute values; the handler gets them decoded, and a batch body (not
// supported) is refused with a problem, not a 500.
func TestCloudEventsPercentDecoding(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-ce-pct")
	var got inbox.Message
	h, err := cwebhook.New(cwebhook.Config{Inbox: env.Inbox, Handler: func(ctx context.Context, tx any, m inbox.Message) error {
		got = m
		return nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	id := txbox.NewID()
	resp, p := post(t, srv.URL, "x", map[string]string{"ce-specversion": "1.0", "ce-id": id.String(), "ce-source": "/s",
		"ce-type": "order-created", "ce-subject": "order%207%20%E2%9C%93"}, http.MethodPost)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d: %+v", resp.StatusCode, p)
	}
	if got.ID != id || got.Key != "order 7 ✓" || got.Headers["ce-subject"] != "order 7 ✓" {
		t.Fatalf("handled %+v", got)
	}
	resp, p = post(t, srv.URL, `[]`, map[string]string{"Content-Type": "application/cloudevents-batch+json"}, http.MethodPost)
	if resp.StatusCode != http.StatusBadRequest || p.Type != cwebhook.ProblemEventID {
		t.Fatalf("batch: status %d %+v", resp.StatusCode, p)
	}
}
