package rabbitmq_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/sendertest"
)

// TestCloudEventsHeaders sends in the cloudevents format through a real
// broker and decodes each delivery as the AMQP binding defines binary
// mode, with the SDK's attribute rules: every cloudEvents: header is an
// attribute, the content-type property the datacontenttype, the body the
// data. Every attribute and the data bytes must be the event's.
func TestCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order-created", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEvents, Source: "/orders"}})
	msgs := sendertest.NewMessages(3, sender.Route{Exchange: tp.exchange, RoutingKey: "order-created"})
	msgs[0].Headers[txbox.HeaderTraceParent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msgs[1].Key = ""
	msgs[2].Headers["content-type"] = "application/json"
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	byID := map[string]amqp.Delivery{}
	for _, d := range tp.waitFor(t, len(msgs)) {
		byID[d.MessageId] = d
	}
	for i, m := range msgs {
		d, ok := byID[m.ID.String()]
		if !ok {
			t.Fatalf("message %d not delivered", i)
		}
		h := map[string]string{}
		for k, v := range d.Headers {
			s, ok := v.(string)
			if !ok {
				t.Errorf("message %d: header %s is a %T, want a string", i, k, v)
			}
			h[k] = s
		}
		if _, ok := h["content-type"]; ok {
			t.Errorf("message %d: the event's content-type header stayed beside the property", i)
		}
		e, err := sendertest.DecodeBinary(rabbitmq.HeaderPrefixCloudEvents, h, d.ContentType, d.Body)
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
		sendertest.CheckCloudEvent(t, e, m, "/orders", sender.DefaultDataContentType)
		if h[txbox.HeaderEventID] != m.ID.String() {
			t.Errorf("message %d: txbox-event-id %q", i, h[txbox.HeaderEventID])
		}
	}
}

// TestCloudEventsFormatErrors: structured mode is for webhooks, at New
// and on a route.
func TestCloudEventsFormatErrors(t *testing.T) {
	t.Parallel()
	for _, ce := range []sender.CloudEvents{{Format: sender.FormatCloudEventsStructured}, {Format: "json"}, {Source: " "}} {
		if _, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://127.0.0.1:1/", CloudEvents: ce}); !errors.Is(err, rabbitmq.ErrInvalidConfig) {
			t.Errorf("New(%+v) = %v, want ErrInvalidConfig", ce, err)
		}
	}
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(1, sender.Route{RoutingKey: "nowhere", Format: sender.FormatCloudEventsStructured})
	err := sender.Results(s.Send(context.Background(), msgs), 1)[0]
	if txbox.Classify(err) != txbox.ClassPermanent || !errors.Is(err, sender.ErrFormatUnsupported) {
		t.Fatalf("structured route: %v, want permanent ErrFormatUnsupported", fmt.Sprint(err))
	}
}
