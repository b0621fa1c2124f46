package config

import (
	"errors"
	"strings"
	"testing"

	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/redisstream"
	"github.com/txbox/txbox/sender/webhook"
)

// TestCloudEventsKeys: the format and cloudevents keys of every sender
// type reach the sender's Config, and a route's format overrides the
// sender's per event type.
func TestCloudEventsKeys(t *testing.T) {
	t.Parallel()
	c, err := Load(Source{Name: "txbox.yaml", YAML: []byte(`
senders:
  n: { type: nats, format: cloudevents, cloudevents: { source: /orders, content-type: application/json } }
  h: { type: webhook, url: "http://127.0.0.1:9/", format: cloudevents-structured, content-type: application/json }
  k: { type: kafka, brokers: [127.0.0.1:9092], format: cloudevents }
  r: { type: rabbitmq, url: "amqp://127.0.0.1/", cloudevents: { source: "https://orders.example.com" } }
  s: { type: redis, format: txbox }
defaults: { sender: n }
events:
  order-created: { route: { format: txbox } }
  order-paid: { sender: r, route: { routing-key: paid, format: cloudevents } }
`)})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]sender.CloudEvents{
		"n": {Format: sender.FormatCloudEvents, Source: "/orders", DataContentType: "application/json"},
		"h": {Format: sender.FormatCloudEventsStructured},
		"k": {Format: sender.FormatCloudEvents},
		"r": {Source: "https://orders.example.com"},
		"s": {Format: sender.FormatTxbox},
	}
	for name, w := range want {
		cfg, err := c.senderConfig(name, func(string) string { return "" }, nil)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		var got sender.CloudEvents
		switch v := cfg.(type) {
		case nats.Config:
			got = v.CloudEvents
		case webhook.Config:
			got = v.CloudEvents
			if v.ContentType != "application/json" {
				t.Errorf("h: content-type %q", v.ContentType)
			}
		case kafka.Config:
			got = v.CloudEvents
		case rabbitmq.Config:
			got = v.CloudEvents
		case redisstream.Config:
			got = v.CloudEvents
		}
		if got != w {
			t.Errorf("%s: CloudEvents %+v, want %+v", name, got, w)
		}
	}
	if f := c.Effective("order-created").Route.Format; f != sender.FormatTxbox {
		t.Errorf("order-created route format %q", f)
	}
	if r := c.Effective("order-paid").Route; r.Format != sender.FormatCloudEvents || r.RoutingKey != "paid" {
		t.Errorf("order-paid route %+v", r)
	}
	if f := c.Effective("unlisted").Route.Format; f != "" {
		t.Errorf("unlisted route format %q, want the sender's", f)
	}
}

// TestCloudEventsKeyErrors: each bad value is refused at its key path.
func TestCloudEventsKeyErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ yaml, want string }{
		{"senders: { n: { type: nats, format: cloudevent } }", `senders.n.format: must be txbox, cloudevents or cloudevents-structured, not "cloudevent"`},
		{"senders: { n: { type: kafka, brokers: [a:1], format: cloudevents-structured } }", "senders.n.format: cloudevents-structured is for webhook senders, not kafka"},
		{"senders: { n: { type: nats, cloudevents: { source: 'a b' } } }", `senders.n.cloudevents.source: must be a URI-reference`},
		{"senders: { n: { type: redis, cloudevents: { content-type: 'json' } } }", `senders.n.cloudevents.content-type: must be a media type`},
		{"senders: { n: { type: nats, cloudevents: { sauce: x } } }", "senders.n.cloudevents.sauce: unknown key"},
		{"senders: { n: { type: nats } }\nevents: { a: { route: { format: xml } } }", `events.a.route.format: must be txbox, cloudevents or cloudevents-structured, not "xml"`},
		{"senders: { n: { type: nats } }\ndefaults: { route: { format: cloudevents-structured } }", "defaults.route.format: cloudevents-structured is for webhook senders, not nats"},
		{"senders: { n: { type: rabbitmq, url: 'amqp://h/' } }\nevents: { a: { route: { format: cloudevents-structured } } }", "events.a.route.format: cloudevents-structured is for webhook senders, not rabbitmq"},
	} {
		_, err := Load(Source{Name: "txbox.yaml", YAML: []byte(tc.yaml)})
		if err == nil || !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Load(%q) = %v\nwant an error containing %q", tc.yaml, err, tc.want)
		}
	}
}
