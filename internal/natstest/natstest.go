// Package natstest connects tests to the local NATS server's JetStream:
// the set-up that every test of a NATS sender, consumer or command needs
// before it creates its own stream.
package natstest

import (
	"net/url"
	"testing"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/internal/testenv"
)

// JetStream connects to the NATS server at serverURL (testenv.NATSURL,
// or a fault proxy in front of it) and returns its JetStream context; the
// connection is closed when t ends. An unreachable server fails t with
// the hint to start the services.
func JetStream(t testing.TB, serverURL string) jetstream.JetStream {
	t.Helper()
	if u, err := url.Parse(serverURL); err == nil && u.Host != "" {
		testenv.RequireTCP(t, "NATS", u.Host)
	}
	nc, err := natsgo.Connect(serverURL)
	if err != nil {
		t.Fatalf("natstest: connect %s: %v", serverURL, err)
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatalf("natstest: jetstream: %v", err)
	}
	return js
}
