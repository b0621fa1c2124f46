package webhook_test

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

// sdkReceiver is an endpoint that decodes every request with the
// CloudEvents Go SDK's HTTP binding, as a CloudEvents consumer would.
type sdkReceiver struct {
	mu     sync.Mutex
	events map[string]event.Event // by id
	bodies map[string][]byte
	hdrs   map[string]http.Header
	errs   []error
}

func newSDKReceiver(t *testing.T) (*sdkReceiver, string) {
	rc := &sdkReceiver{events: map[string]event.Event{}, bodies: map[string][]byte{}, hdrs: map[string]http.Header{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		rc.mu.Lock()
		defer rc.mu.Unlock()
		if err != nil {
			rc.errs = append(rc.errs, err)
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		rc.events[e.ID()] = *e
		rc.hdrs[e.ID()] = r.Header.Clone()
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	return rc, srv.URL
}

func (rc *sdkReceiver) event(t *testing.T, id txbox.ID) (event.Event, http.Header) {
	t.Helper()
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if len(rc.errs) > 0 {
		t.Fatalf("the SDK could not decode a request: %v", rc.errs)
	}
	e, ok := rc.events[id.String()]
	if !ok {
		t.Fatalf("no event %s received (have %d)", id, len(rc.events))
	}
	return e, rc.hdrs[id.String()]
}

// cloudEventMessages are messages that exercise every attribute: a
// trace, a key, an event without a key, one with its own content type
// and a JSON payload.
func cloudEventMessages(route sender.Route) []*sender.Message {
	msgs := sendertest.NewMessages(3, route)
	msgs[0].Headers[txbox.HeaderTraceParent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msgs[0].Headers[txbox.HeaderTraceState] = "congo=t61rcWkgMzE"
	msgs[1].Key = ""
	msgs[2].Headers["Content-Type"] = "application/json"
	msgs[2].Payload = []byte(`{"order": 42, "items": ["a", "b"]}`)
	return msgs
}

// TestCloudEventsBinaryReadBySDK sends in the cloudevents format and
// decodes each request with the SDK's HTTP binding: every attribute and
// the data bytes must be the event's.
func TestCloudEventsBinaryReadBySDK(t *testing.T) {
	t.Parallel()
	rc, url := newSDKReceiver(t)
	s := newSender(t, webhook.Config{CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEvents, Source: "https://orders.example.com/outbox"}})
	msgs := cloudEventMessages(sender.Route{URL: url})
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for _, m := range msgs {
		e, h := rc.event(t, m.ID)
		sendertest.CheckCloudEvent(t, e, m, "https://orders.example.com/outbox", webhook.DefaultContentType)
		if h.Get("Ce-Specversion") != "1.0" {
			t.Errorf("ce-specversion header = %q", h.Get("Ce-Specversion"))
		}
		// The txbox headers stay: a consumer of either format dedupes.
		if h.Get(txbox.HeaderEventID) != m.ID.String() || h.Get(webhook.HeaderIdempotencyKey) != m.ID.String() {
			t.Errorf("event %s: txbox-event-id %q, Idempotency-Key %q", m.ID, h.Get(txbox.HeaderEventID), h.Get(webhook.HeaderIdempotencyKey))
		}
	}
}

// TestCloudEventsStructuredReadBySDK sends cloudevents-structured and
// decodes each body with the SDK: JSON data arrives as it was, byte for
// byte, and any other payload through data_base64.
func TestCloudEventsStructuredReadBySDK(t *testing.T) {
	t.Parallel()
	rc, url := newSDKReceiver(t)
	s := newSender(t, webhook.Config{Secret: "s3cret"})
	msgs := cloudEventMessages(sender.Route{URL: url, Format: sender.FormatCloudEventsStructured})
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	for _, m := range msgs {
		e, h := rc.event(t, m.ID)
		sendertest.CheckCloudEvent(t, e, m, sender.DefaultSource, webhook.DefaultContentType)
		if ct := h.Get("Content-Type"); ct != sender.ContentTypeStructured {
			t.Errorf("Content-Type = %q, want %q", ct, sender.ContentTypeStructured)
		}
		if h.Get("Ce-Id") != "" {
			t.Errorf("structured mode sent ce- headers too: %v", h)
		}
	}
}

// TestCloudEventsStructuredBody checks the envelope itself, as the JSON
// event format defines it, without the SDK: a JSON payload is the data
// member unchanged, and the signature covers the envelope.
func TestCloudEventsStructuredBody(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var body []byte
	var sig string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		body, _ = io.ReadAll(r.Body)
		sig = r.Header.Get(webhook.DefaultSignatureHeader)
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{Secret: "s3cret", ContentType: "application/json",
		CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEventsStructured}})
	m := sendertest.NewMessages(1, sender.Route{URL: srv.URL})[0]
	m.Payload = []byte(`{"a": [1, 2]}`)
	if err := send(t, s, []*sender.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var env map[string]json.RawMessage
	if err := json.Unmarshal(body, &env); err != nil {
		t.Fatalf("body %q: %v", body, err)
	}
	if string(env["data"]) != string(m.Payload) {
		t.Errorf("data = %s, want %s", env["data"], m.Payload)
	}
	if string(env["datacontenttype"]) != `"application/json"` || string(env["id"]) != `"`+m.ID.String()+`"` {
		t.Errorf("envelope %s", body)
	}
	if err := webhook.Verify("s3cret", sig, body, time.Minute); err != nil {
		t.Errorf("signature over the envelope: %v", err)
	}
}

// TestCloudEventsPercentEncoding checks the HTTP binding's rule for
// header values: a subject with a space, a quote, a percent sign and a
// non-ASCII rune travels percent-encoded.
func TestCloudEventsPercentEncoding(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var got string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		got = r.Header.Get("Ce-Subject")
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEvents}})
	m := sendertest.NewMessages(1, sender.Route{URL: srv.URL})[0]
	m.Key = `order 7 "50%" ✓`
	if err := send(t, s, []*sender.Message{m})[0]; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if want := "order%207%20%2250%25%22%20%E2%9C%93"; got != want {
		t.Fatalf("ce-subject = %q, want %q", got, want)
	}
}

// TestCloudEventsFormatErrors: a bad format is a ConfigError naming the
// key, and a route with an unknown format fails its message permanent.
func TestCloudEventsFormatErrors(t *testing.T) {
	t.Parallel()
	for field, cfg := range map[string]webhook.Config{
		"format":       {CloudEvents: sender.CloudEvents{Format: "cloudevent"}},
		"source":       {CloudEvents: sender.CloudEvents{Source: "has space"}},
		"content-type": {CloudEvents: sender.CloudEvents{DataContentType: "not a type"}},
	} {
		_, err := webhook.New(cfg)
		var ce *webhook.ConfigError
		if !errors.As(err, &ce) || ce.Field != field {
			t.Errorf("New(%+v) = %v, want a ConfigError for %s", cfg.CloudEvents, err, field)
		}
	}
	s := newSender(t, webhook.Config{})
	m := sendertest.NewMessages(1, sender.Route{URL: "http://127.0.0.1:1/", Format: "binary"})[0]
	if err := send(t, s, []*sender.Message{m})[0]; txbox.Classify(err) != txbox.ClassPermanent {
		t.Fatalf("unknown route format: %v, want permanent", err)
	}
}
