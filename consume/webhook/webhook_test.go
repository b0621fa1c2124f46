package webhook_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

const secret = "s3cret-for-tests"

func server(t *testing.T, env *consumetest.Env, cfg cwebhook.Config) *httptest.Server {
	t.Helper()
	cfg.Inbox, cfg.Handler = env.Inbox, env.Handler
	h, err := cwebhook.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func messages(url string, ids []txbox.ID) []*sender.Message {
	out := make([]*sender.Message, len(ids))
	for i, id := range ids {
		out[i] = &sender.Message{ID: id, EventType: "order-created", Payload: []byte(`{"n":1}`), Attempt: 1,
			Headers: map[string]string{txbox.HeaderEventType: "order-created"}, Route: sender.Route{URL: url}}
	}
	return out
}

// TestThroughWebhookSender: txbox's own webhook sender, signing with the
// shared secret, delivers a batch twice; the second time every message is
// a duplicate, acked, with no second effect. A failing handler makes the
// sender see a retryable (transient) error for that message only.
func TestThroughWebhookSender(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-test")
	srv := server(t, env, cwebhook.Config{Secret: secret})
	s, err := webhook.New(webhook.Config{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ids := make([]txbox.ID, 50)
	for i := range ids {
		ids[i] = txbox.NewID()
	}
	env.FailFirst(ids[4], 1)
	err = s.Send(context.Background(), messages(srv.URL, ids))
	errs := sender.Results(err, len(ids))
	for i, e := range errs {
		if i == 4 {
			if e == nil || txbox.Classify(e) != txbox.ClassTransient {
				t.Errorf("failing handler: sender error %v (class %v), want transient", e, txbox.Classify(e))
			}
			continue
		}
		if e != nil {
			t.Errorf("message %d: %v", i, e)
		}
	}
	// The relay retries everything not acked; here, the whole batch.
	if err := s.Send(context.Background(), messages(srv.URL, ids)); err != nil {
		t.Fatalf("second delivery: %v", err)
	}
	env.CheckExactlyOnce(t, ids)
	if got := env.Calls(); got != len(ids)+1 {
		t.Errorf("handler calls = %d, want %d", got, len(ids)+1)
	}
}

func post(t *testing.T, url string, body string, headers map[string]string, method string) (*http.Response, cwebhook.Problem) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p cwebhook.Problem
	if resp.StatusCode >= 400 {
		if ct := resp.Header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("error content type = %q", ct)
		}
		if err := json.NewDecoder(resp.Body).Decode(&p); err != nil {
			t.Errorf("problem body: %v", err)
		}
	}
	return resp, p
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-bad")
	srv := server(t, env, cwebhook.Config{Secret: secret, MaxBodyBytes: 64})
	id := txbox.NewID().String()
	signed := func(body string) string { return webhook.Sign(secret, time.Now(), []byte(body)) }
	cases := []struct {
		name    string
		method  string
		body    string
		headers map[string]string
		status  int
		typ     string
	}{
		{"get", http.MethodGet, "", nil, 405, cwebhook.ProblemMethod},
		{"no signature", http.MethodPost, "{}", map[string]string{webhook.HeaderIdempotencyKey: id}, 401, cwebhook.ProblemSignature},
		{"wrong secret", http.MethodPost, "{}", map[string]string{webhook.HeaderIdempotencyKey: id, "Txbox-Signature": webhook.Sign("other", time.Now(), []byte("{}"))}, 401, cwebhook.ProblemSignature},
		{"tampered body", http.MethodPost, `{"n":2}`, map[string]string{webhook.HeaderIdempotencyKey: id, "Txbox-Signature": signed(`{"n":1}`)}, 401, cwebhook.ProblemSignature},
		{"expired", http.MethodPost, "{}", map[string]string{webhook.HeaderIdempotencyKey: id, "Txbox-Signature": webhook.Sign(secret, time.Now().Add(-time.Hour), []byte("{}"))}, 401, cwebhook.ProblemSignature},
		{"no id", http.MethodPost, "{}", map[string]string{"Txbox-Signature": signed("{}")}, 400, cwebhook.ProblemEventID},
		{"hostile id", http.MethodPost, "{}", map[string]string{webhook.HeaderIdempotencyKey: `x"; DROP TABLE t;--`, "Txbox-Signature": signed("{}")}, 400, cwebhook.ProblemEventID},
		{"too large", http.MethodPost, strings.Repeat("x", 65), map[string]string{webhook.HeaderIdempotencyKey: id, "Txbox-Signature": signed(strings.Repeat("x", 65))}, 413, cwebhook.ProblemTooLarge},
	}
	for _, c := range cases {
		resp, p := post(t, srv.URL, c.body, c.headers, c.method)
		if resp.StatusCode != c.status || p.Type != c.typ || p.Status != c.status {
			t.Errorf("%s: status %d problem %+v; want %d %s", c.name, resp.StatusCode, p, c.status, c.typ)
		}
		if strings.Contains(p.Detail, secret) {
			t.Errorf("%s: the secret leaks into the problem detail", c.name)
		}
	}
	if n := env.Calls(); n != 0 {
		t.Errorf("handler ran %d times for bad requests", n)
	}
	// A correct request is processed, then a duplicate; both 200.
	for _, want := range []string{"processed", "duplicate"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(webhook.HeaderIdempotencyKey, id)
		req.Header.Set("Txbox-Signature", signed("{}"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var r cwebhook.Response
		err = json.NewDecoder(resp.Body).Decode(&r)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || r.Result != want {
			t.Fatalf("valid request: status %d, result %q (%v); want 200 %s", resp.StatusCode, r.Result, err, want)
		}
	}
	parsed, _ := txbox.ParseID(id)
	env.CheckExactlyOnce(t, []txbox.ID{parsed})
}

func TestNoSecretAcceptsUnsigned(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-open")
	srv := server(t, env, cwebhook.Config{})
	id := txbox.NewID()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	req.Header.Set(txbox.HeaderEventID, id.String())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var r cwebhook.Response
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || resp.StatusCode != 200 || r.Result != "processed" || r.EventID != id {
		t.Fatalf("status %d, body %+v, %v", resp.StatusCode, r, err)
	}
	if _, err := cwebhook.New(cwebhook.Config{}); err == nil {
		t.Error("New without Inbox/Handler accepted")
	}
}

// TestPermanentHandlerErrorIs422: a poison event marked txbox.Permanent
// is a 422, which txbox's sender classifies as a rejection (an attempt is
// counted, then it is dead-lettered) rather than an outage.
func TestPermanentHandlerErrorIs422(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-poison")
	h, err := cwebhook.New(cwebhook.Config{Inbox: env.Inbox, Handler: func(context.Context, any, inbox.Message) error {
		return txbox.Permanent(errors.New("unknown product"))
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	s, err := webhook.New(webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	err = s.Send(context.Background(), messages(srv.URL, []txbox.ID{txbox.NewID()}))
	errs := sender.Results(err, 1)
	if errs[0] == nil || txbox.Classify(errs[0]) == txbox.ClassTransient {
		t.Fatalf("sender error %v (class %v); want a non-transient rejection", errs[0], txbox.Classify(errs[0]))
	}
	resp, p := post(t, srv.URL, "{}", map[string]string{txbox.HeaderEventID: txbox.NewID().String()}, http.MethodPost)
	if resp.StatusCode != http.StatusUnprocessableEntity || p.Type != cwebhook.ProblemRejected {
		t.Errorf("status %d problem %+v; want 422 %s", resp.StatusCode, p, cwebhook.ProblemRejected)
	}
}
