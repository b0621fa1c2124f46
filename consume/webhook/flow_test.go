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
	"github.com/txbox/txbox/internal/testenv"
)

// TestLostIsAcknowledged: in non-transactional mode a handler failure
// after the id was recorded is answered 200 "lost", since a retry would
// only be a duplicate; the retry indeed is one.
func TestLostIsAcknowledged(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-lost")
	in, err := inbox.New(env.Store, inbox.Config{Consumer: "webhook-lost", Mode: inbox.NonTransactional})
	if err != nil {
		t.Fatal(err)
	}
	calls := 0
	h, err := cwebhook.New(cwebhook.Config{Inbox: in, Handler: func(context.Context, any, inbox.Message) error {
		calls++
		return errors.New("smtp down")
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	id := txbox.NewID().String()
	for _, want := range []string{"lost", "duplicate"} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(txbox.HeaderEventID, id)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body cwebhook.Response
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || body.Result != want {
			t.Errorf("status %d result %q; want 200 %q", resp.StatusCode, body.Result, want)
		}
	}
	if calls != 1 {
		t.Errorf("handler ran %d times, want 1", calls)
	}
}

// TestShutdownDrains: the webhook adapter's graceful stop is
// http.Server.Shutdown: it takes no new connection and waits for the
// requests in flight, whose handler context is not cancelled, so the
// running handler commits and its sender gets a 200 rather than a retry.
func TestShutdownDrains(t *testing.T) {
	t.Parallel()
	env := consumetest.New(t, "webhook-drain")
	started := make(chan struct{})
	release := make(chan struct{})
	h, err := cwebhook.New(cwebhook.Config{Inbox: env.Inbox, Handler: func(ctx context.Context, tx any, m inbox.Message) error {
		if err := env.Handler(ctx, tx, m); err != nil {
			return err
		}
		close(started)
		select {
		case <-release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	id := txbox.NewID()
	type result struct {
		status int
		err    error
	}
	got := make(chan result, 1)
	go func() {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
		req.Header.Set(txbox.HeaderEventID, id.String())
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			got <- result{err: err}
			return
		}
		resp.Body.Close()
		got <- result{status: resp.StatusCode}
	}()
	<-started
	shut := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut <- srv.Config.Shutdown(ctx)
	}()
	// New connections are refused once Shutdown closed the listener.
	testenv.WaitFor(t, 10*time.Second, "Shutdown to refuse new connections", func() bool {
		c, err := (&http.Client{Timeout: time.Second, Transport: &http.Transport{DisableKeepAlives: true}}).Post(srv.URL, "application/json", strings.NewReader("{}"))
		if err == nil {
			c.Body.Close()
		}
		return err != nil
	})
	close(release)
	r := <-got
	if r.err != nil || r.status != http.StatusOK {
		t.Fatalf("in-flight request: status %d, err %v; want 200", r.status, r.err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown = %v", err)
	}
	env.CheckExactlyOnce(t, []txbox.ID{id})
}
