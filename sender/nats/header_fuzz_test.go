package nats

import (
	"net/textproto"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
)

// FuzzHeaderRoundTrip checks the header validation against nats.go and a
// real server: a header natsMsg accepts must publish without error and
// arrive with its exact name and its value intact up to the surrounding
// whitespace NATS trims; one it refuses never reaches the wire.
func FuzzHeaderRoundTrip(f *testing.F) {
	for _, seed := range [][2]string{
		{"X-Tenant", "acme"},
		{"x-MixedCase", "v"},
		{"x-unicode", "grüße ✓"},
		{"x-spaces", "  padded\t"},
		{"x-colon", "a: b"},
		{"bad name", "v"},
		{"bad:name", "v"},
		{"x-crlf", "a\r\nInjected: 1"},
		{"x-nul", "a\x00b"},
		{"Nats-Rollup", "all"},
		{"nats-msg-id", "forged"},
		{"", "v"},
	} {
		f.Add(seed[0], seed[1])
	}
	nc, err := natsgo.Connect(testenv.NATSURL)
	if err != nil {
		f.Fatalf("connect to NATS at %s: %v", testenv.NATSURL, err)
	}
	f.Cleanup(nc.Close)
	subject := testenv.UniqueName("fuzz_") + ".headers"
	sub, err := nc.SubscribeSync(subject)
	if err != nil {
		f.Fatal(err)
	}

	f.Fuzz(func(t *testing.T, name, value string) {
		m := &sender.Message{ID: txbox.NewID(), EventType: "fuzz", Payload: []byte("x"),
			Headers: map[string]string{name: value}, Route: sender.Route{Subject: subject}}
		nm, err := natsMsg(m)
		if err != nil {
			if checkHeader(name, value) == nil {
				t.Fatalf("natsMsg refused %q=%q that checkHeader accepts: %v", name, value, err)
			}
			return
		}
		if err := nc.PublishMsg(nm); err != nil {
			t.Fatalf("header %q=%q accepted but nats.go refused it: %v", name, value, err)
		}
		got, err := sub.NextMsg(5 * time.Second)
		if err != nil {
			t.Fatalf("header %q=%q: message not received: %v", name, value, err)
		}
		if name == txbox.HeaderEventID {
			return // overwritten with the event id by design
		}
		want := textproto.TrimString(value)
		if vs := got.Header[name]; len(vs) != 1 || vs[0] != want {
			t.Fatalf("header %q=%q arrived as %q, want [%q]", name, value, vs, want)
		}
	})
}
