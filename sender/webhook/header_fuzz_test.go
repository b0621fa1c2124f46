package webhook

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/textproto"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// FuzzHeaderRoundTrip checks the header validation against net/http
// itself: a header the sender accepts must be sent without a transport
// error and arrive with its value intact, up to the surrounding
// whitespace HTTP trims; a header it refuses fails Permanent without a
// request.
func FuzzHeaderRoundTrip(f *testing.F) {
	for _, seed := range [][2]string{
		{"X-Tenant", "acme"},
		{"x-unicode", "grüße ✓"},
		{"x-spaces", "  padded\t"},
		{"x-colon", "a: b"},
		{"bad name", "v"},
		{"x-crlf", "a\r\nInjected: 1"},
		{"x-nul", "a\x00b"},
		{"x-del", "a\x7fb"},
		{"", "v"},
		{"x-tab", "a\tb"},
	} {
		f.Add(seed[0], seed[1])
	}
	var got http.Header
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Clone()
	}))
	f.Cleanup(srv.Close)
	s, err := New(Config{})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { _ = s.Close(context.Background()) })

	f.Fuzz(func(t *testing.T, name, value string) {
		m := &sender.Message{ID: txbox.NewID(), EventType: "fuzz", Payload: []byte("x"),
			Headers: map[string]string{name: value}, Route: sender.Route{URL: srv.URL}}
		got = nil
		err := sender.Results(s.Send(context.Background(), []*sender.Message{m}), 1)[0]
		accepted := checkName(name) == nil && checkValue(value) == nil && !reserved(name, s.sigHeader)
		if !accepted {
			if err == nil || txbox.Classify(err) != txbox.ClassPermanent {
				t.Fatalf("header %q=%q: Send = %v, want a permanent refusal", name, value, err)
			}
			return
		}
		if err != nil {
			t.Fatalf("header %q=%q accepted by validation but failed: %v", name, value, err)
		}
		key := http.CanonicalHeaderKey(name)
		want := textproto.TrimString(value)
		if key == "Content-Type" {
			return // sent as the request's content type, checked elsewhere
		}
		if key == "Txbox-Event-Id" || key == "User-Agent" {
			return // set by the sender on every request
		}
		if g := got.Get(key); g != want {
			t.Fatalf("header %q=%q arrived as %q, want %q", name, value, g, want)
		}
	})
}
