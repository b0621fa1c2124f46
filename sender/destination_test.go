package sender_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

type plainSender struct{}

func (plainSender) Send(context.Context, []*sender.Message) error { return nil }
func (plainSender) Close(context.Context) error                   { return nil }

type hostSender struct{ plainSender }

func (hostSender) Destination(r sender.Route) string { return "only:" + r.Topic }

func TestDestinationOf(t *testing.T) {
	t.Parallel()
	a := sender.Route{Topic: "a", URL: "http://x/y"}
	if got, want := sender.DestinationOf(plainSender{}, a), "topic=a url=http://x/y"; got != want {
		t.Fatalf("default destination = %q, want %q", got, want)
	}
	if sender.DestinationOf(plainSender{}, a) == sender.DestinationOf(plainSender{}, sender.Route{Topic: "b"}) {
		t.Fatal("two different routes share a destination")
	}
	if got := sender.DestinationOf(hostSender{}, a); got != "only:a" {
		t.Fatalf("Destinationer not used: %q", got)
	}
}

func TestDisconnected(t *testing.T) {
	t.Parallel()
	if sender.Disconnected(nil) != nil {
		t.Fatal("Disconnected(nil) != nil")
	}
	base := errors.New("nats: connection closed")
	err := fmt.Errorf("send: %w", sender.Disconnected(txbox.Transient(base)))
	if !sender.IsDisconnected(err) {
		t.Fatal("wrapped mark not found")
	}
	if !errors.Is(err, base) || err.Error() != "send: nats: connection closed" {
		t.Fatalf("mark changed the error: %v", err)
	}
	if txbox.Classify(err) != txbox.ClassTransient {
		t.Fatalf("class = %v, want transient", txbox.Classify(err))
	}
	if sender.IsDisconnected(txbox.Transient(base)) {
		t.Fatal("unmarked error reported as disconnected")
	}
}
