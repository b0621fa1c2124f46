package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestCloudEventsRoundTrip: outbox → relay → webhook sender in each
// CloudEvents mode → consume/webhook → inbox. Every committed event has
// exactly one effect, its inbox id, type and key taken from the id, type
// and subject attributes (ce- headers in binary mode, the JSON envelope in
// structured mode); the CloudEvents Go SDK's HTTP binding, in front of
// the handler, decodes every request the relay sent as a valid event;
// copies posted by hand with the attributes only (no Idempotency-Key, no
// txbox-event-id) are recognised as duplicates.
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
			sdk := &sdkDecoder{next: h, events: map[string]event.Event{}}
			srv := httptest.NewServer(sdk)
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
			sdk.check(t, p.Committed())
			check.Copies(t, func(id txbox.ID) { postCopy(t, srv.URL, format, id) })
		})
	}
}

// sdkDecoder decodes every request with the CloudEvents Go SDK's HTTP
// binding, as a CloudEvents consumer in front of the inbox would, then
// hands it on to next.
type sdkDecoder struct {
	next http.Handler

	mu     sync.Mutex
	events map[string]event.Event
	errs   []error
}

func (d *sdkDecoder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	r.Body = io.NopCloser(bytes.NewReader(body))
	e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
	r.Body = io.NopCloser(bytes.NewReader(body))
	d.mu.Lock()
	if err != nil {
		d.errs = append(d.errs, err)
	} else {
		d.events[e.ID()] = *e
	}
	d.mu.Unlock()
	d.next.ServeHTTP(w, r)
}

// check fails t unless the SDK decoded a valid event for each id, with
// the attributes the relay's rows give.
func (d *sdkDecoder) check(t *testing.T, ids []txbox.ID) {
	t.Helper()
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.errs) > 0 {
		t.Fatalf("the SDK could not decode %d requests: %v", len(d.errs), d.errs[0])
	}
	for _, id := range ids {
		e, ok := d.events[id.String()]
		switch {
		case !ok:
			t.Errorf("no event %s decoded", id)
		case e.Validate() != nil || e.Source() != "/orders" || e.Type() != "order-created" ||
			!strings.HasPrefix(e.Subject(), "order-") || e.DataContentType() != "application/json" ||
			e.Time().IsZero() || !json.Valid(e.Data()):
			t.Errorf("event %s as the SDK decoded it: %v", id, e)
		}
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
