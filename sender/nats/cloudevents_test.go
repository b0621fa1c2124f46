package nats_test

import (
	"context"
	"errors"
	"testing"
	"time"

	cejsm "github.com/cloudevents/sdk-go/protocol/nats_jetstream/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

// TestCloudEventsReadBySDK sends in the cloudevents format to a real
// JetStream subject, pulls the messages back, and decodes each with the
// CloudEvents Go SDK's NATS JetStream binding: every attribute and the
// data bytes must be the event's.
func TestCloudEventsReadBySDK(t *testing.T) {
	t.Parallel()
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{CloudEvents: sender.CloudEvents{Source: "/orders", DataContentType: "application/vnd.orders+json"}})
	msgs := sendertest.NewMessages(3, sender.Route{Subject: st.subject(), Format: sender.FormatCloudEvents})
	msgs[0].Headers[txbox.HeaderTraceParent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msgs[1].Key = ""
	msgs[2].Headers["Content-Type"] = "text/plain; charset=utf-8"
	for i, err := range send(t, s, msgs) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}

	nc, err := natsgo.Connect("nats://" + natsAddr(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	js, err := nc.JetStream()
	if err != nil {
		t.Fatal(err)
	}
	sub, err := js.PullSubscribe(st.subject(), "", natsgo.BindStream(st.name))
	if err != nil {
		t.Fatal(err)
	}
	got, err := sub.Fetch(len(msgs), natsgo.MaxWait(10*time.Second))
	if err != nil || len(got) != len(msgs) {
		t.Fatalf("fetched %d of %d messages: %v", len(got), len(msgs), err)
	}
	for i, nm := range got {
		e, err := binding.ToEvent(context.Background(), cejsm.NewMessage(nm))
		if err != nil {
			t.Fatalf("message %d: the SDK cannot decode it: %v (headers %v)", i, err, nm.Header)
		}
		if nm.Header.Get("Content-Type") != "" {
			t.Errorf("message %d kept the event's Content-Type header beside content-type: %v", i, nm.Header)
		}
		sendertest.CheckCloudEvent(t, *e, msgs[i], "/orders", "application/vnd.orders+json")
		// The txbox headers stay: a consumer of either format dedupes.
		if nm.Header.Get(txbox.HeaderEventID) != msgs[i].ID.String() || nm.Header.Get(txnats.HeaderMsgID) != msgs[i].ID.String() {
			t.Errorf("message %d: headers %v", i, nm.Header)
		}
	}
}

// TestCloudEventsConfig: structured mode is for webhooks, and a route
// asking for it fails its message permanent.
func TestCloudEventsConfig(t *testing.T) {
	t.Parallel()
	_, err := txnats.New(txnats.Config{URL: "nats://127.0.0.1:1", CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEventsStructured}})
	var ce *txnats.ConfigError
	if !errors.As(err, &ce) || ce.Field != "format" {
		t.Fatalf("New with structured = %v, want a ConfigError for format", err)
	}
	st := newStream(t)
	s := openSender(t, natsAddr(t), txnats.Config{})
	msgs := sendertest.NewMessages(1, sender.Route{Subject: st.subject(), Format: sender.FormatCloudEventsStructured})
	if err := send(t, s, msgs)[0]; txbox.Classify(err) != txbox.ClassPermanent || !errors.Is(err, sender.ErrFormatUnsupported) {
		t.Fatalf("structured route: %v, want permanent ErrFormatUnsupported", err)
	}
}
