package webhook_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/sendertest"
	"github.com/txbox/txbox/sender/webhook"
)

func TestDestinationIsSchemeHostPath(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{})
	for in, want := range map[string]string{
		"https://user:s3cr3t@Hooks.Example.com:8443/a/b?token=x#frag": "https://hooks.example.com:8443/a/b",
		"http://h/a?x=1": "http://h/a",
		"http://h":       "http://h/",
		"HTTP://h/a%2Fb": "http://h/a%2Fb",
		"::not a url":    "(invalid url)",
		"":               "(invalid url)",
	} {
		if got := sender.DestinationOf(s, sender.Route{URL: in, Topic: "ignored"}); got != want {
			t.Errorf("destination of %q = %q, want %q", in, got, want)
		}
	}
	if sender.DestinationOf(s, sender.Route{URL: "http://h/a"}) == sender.DestinationOf(s, sender.Route{URL: "http://h/b"}) {
		t.Fatal("two paths share a destination")
	}
}

// Test413IsPermanent: a receiver that refuses the body's size will refuse
// it on every retry: permanent, with the size and the receiver's reason.
func Test413IsPermanent(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/problem+json")
		w.WriteHeader(http.StatusRequestEntityTooLarge)
		_, _ = io.WriteString(w, `{"type":"/problems/body-too-large","title":"body too large","status":413,"detail":"the limit is 1024 bytes"}`)
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{})
	msgs := sendertest.NewMessages(1, sender.Route{URL: srv.URL})
	msgs[0].Payload = make([]byte, 2000)
	err := send(t, s, msgs)[0]
	if txbox.Classify(err) != txbox.ClassPermanent {
		t.Fatalf("413: %v classified %v, want permanent", err, txbox.Classify(err))
	}
	for _, want := range []string{"413", "2000 bytes", "the limit is 1024 bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("413 error %q lacks %q", err, want)
		}
	}
}

func TestNeverDisconnected(t *testing.T) {
	t.Parallel()
	s := newSender(t, webhook.Config{})
	msgs := sendertest.NewMessages(3, sender.Route{URL: "http://" + sendertest.ClosedAddr(t) + "/hook"})
	for i, err := range send(t, s, msgs) {
		if txbox.Classify(err) != txbox.ClassTransient || sender.IsDisconnected(err) {
			t.Fatalf("message %d: %v, want transient and not Disconnected (each URL is its own destination)", i, err)
		}
	}
}

// counting returns a server answering code to every request on /down,
// 200 elsewhere, and the number of requests to /down.
func counting(t *testing.T, code int) (*httptest.Server, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if r.URL.Path == "/down" {
			n.Add(1)
			w.WriteHeader(code)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, &n
}

// TestStopsPostingToADownDestination: a batch of 200 to a receiver that
// answers 503 used to post 200 requests, and the relay's next probe as
// many. Once a handful failed as an outage and none succeeded, the rest
// is failed as not sent (transient, the relay pauses the destination),
// while another destination in the same batch gets all its messages.
func TestStopsPostingToADownDestination(t *testing.T) {
	t.Parallel()
	const concurrency = 4
	srv, down := counting(t, http.StatusServiceUnavailable)
	s := newSender(t, webhook.Config{MaxConcurrency: concurrency})
	msgs := sendertest.NewMessages(200, sender.Route{URL: srv.URL + "/down"})
	for i := 0; i < len(msgs); i += 10 {
		msgs[i].Route.URL = srv.URL + "/up"
	}
	errs := send(t, s, msgs)
	notSent := 0
	for i, err := range errs {
		if i%10 == 0 {
			if err != nil {
				t.Fatalf("message %d to the healthy destination: %v", i, err)
			}
			continue
		}
		if txbox.Classify(err) != txbox.ClassTransient {
			t.Fatalf("message %d: %v, want transient", i, err)
		}
		if strings.Contains(err.Error(), "not sent") {
			notSent++
		}
	}
	n := down.Load()
	t.Logf("%d of 180 messages to a 503 destination posted, %d failed as not sent", n, notSent)
	// 8 failures end it; at most `concurrency` more were in flight.
	if n > 8+concurrency {
		t.Fatalf("%d requests to a destination answering 503, want at most %d", n, 8+concurrency)
	}
	if int64(notSent)+n != 180 {
		t.Fatalf("%d posted + %d not sent != 180", n, notSent)
	}
}

// TestKeepsPostingThrough500s: a 500 is the receiver failing that request
// (its handler), maybe the message's fault: every message is tried, so
// each can count its attempt and a poison message ends dead-lettered.
func TestKeepsPostingThrough500s(t *testing.T) {
	t.Parallel()
	srv, down := counting(t, http.StatusInternalServerError)
	s := newSender(t, webhook.Config{MaxConcurrency: 4})
	msgs := sendertest.NewMessages(50, sender.Route{URL: srv.URL + "/down"})
	for i, err := range send(t, s, msgs) {
		if txbox.Classify(err) != txbox.ClassTransient || strings.Contains(err.Error(), "not sent") {
			t.Fatalf("message %d: %v, want the 500 of its own request", i, err)
		}
	}
	if n := down.Load(); n != 50 {
		t.Fatalf("%d of 50 messages posted to a receiver answering 500", n)
	}
}

// TestSuccessKeepsTheBatchGoing: a destination that answers some requests
// 2xx is up; its 503s are those messages' own, and all are tried.
func TestSuccessKeepsTheBatchGoing(t *testing.T) {
	t.Parallel()
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		if n.Add(1) > 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(srv.Close)
	s := newSender(t, webhook.Config{MaxConcurrency: 1})
	msgs := sendertest.NewMessages(40, sender.Route{URL: srv.URL})
	errs := send(t, s, msgs)
	if errs[0] != nil {
		t.Fatalf("first message: %v", errs[0])
	}
	if got := n.Load(); got != 40 {
		t.Fatalf("%d of 40 messages posted after the destination answered one 2xx", got)
	}
}
