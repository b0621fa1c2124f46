package webhook_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/txbox/txbox"
	cwebhook "github.com/txbox/txbox/consume/webhook"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/webhook"
)

// TestFailureStatuses: each way a delivery can fail has its own status
// and problem type, so that a sender (and the relay behind it) can tell
// "this consumer is down" (503) from "this event failed" (500) from "this
// event can never be processed" (422).
func TestFailureStatuses(t *testing.T) {
	t.Parallel()
	handlerErr := map[string]error{
		"plain":     errors.New("the handler failed"),
		"panic":     nil, // the handler panics
		"permanent": txbox.Permanent(errors.New("unknown product")),
		"transient": fmt.Errorf("downstream: %w", txbox.Transient(errors.New("payments API unavailable"))),
	}
	cases := []struct {
		name   string
		status int
		typ    string
	}{
		{"plain", http.StatusInternalServerError, cwebhook.ProblemHandler},
		{"panic", http.StatusInternalServerError, cwebhook.ProblemHandler},
		{"permanent", http.StatusUnprocessableEntity, cwebhook.ProblemRejected},
		{"transient", http.StatusServiceUnavailable, cwebhook.ProblemUnavailable},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			env := consumetest.New(t, "webhook-status")
			h, err := cwebhook.New(cwebhook.Config{Inbox: env.Inbox, Handler: func(context.Context, any, inbox.Message) error {
				if c.name == "panic" {
					panic("boom")
				}
				return handlerErr[c.name]
			}})
			if err != nil {
				t.Fatal(err)
			}
			srv := httptest.NewServer(h)
			t.Cleanup(srv.Close)
			resp, p := post(t, srv.URL, "{}", map[string]string{txbox.HeaderEventID: txbox.NewID().String()}, http.MethodPost)
			if resp.StatusCode != c.status || p.Type != c.typ || p.Status != c.status || p.Title == "" {
				t.Fatalf("status %d problem %+v; want %d %s", resp.StatusCode, p, c.status, c.typ)
			}
		})
	}
}

// TestStoreDownIs503: the inbox store failing is this consumer's
// infrastructure, not the event: 503, and the handler never runs. The
// webhook sender sees a transient failure.
func TestStoreDownIs503(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-store-down")
	srv := server(t, env, cwebhook.Config{})
	// The inbox's database goes away (closed pool: every statement fails).
	if err := env.Store.DB().Close(); err != nil {
		t.Fatal(err)
	}
	resp, p := post(t, srv.URL, "{}", map[string]string{txbox.HeaderEventID: txbox.NewID().String()}, http.MethodPost)
	if resp.StatusCode != http.StatusServiceUnavailable || p.Type != cwebhook.ProblemUnavailable {
		t.Fatalf("status %d problem %+v; want 503 %s", resp.StatusCode, p, cwebhook.ProblemUnavailable)
	}
	if env.Calls() != 0 {
		t.Fatalf("the handler ran %d times with the store down", env.Calls())
	}
	s, err := webhook.New(webhook.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	errs := sender.Results(s.Send(context.Background(), messages(srv.URL, []txbox.ID{txbox.NewID()})), 1)
	var se *webhook.StatusError
	if !errors.As(errs[0], &se) || se.StatusCode != http.StatusServiceUnavailable || txbox.Classify(errs[0]) != txbox.ClassTransient {
		t.Fatalf("sender error %v, want a transient 503", errs[0])
	}
}
