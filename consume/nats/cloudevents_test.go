package nats_test

import (
	"context"
	"testing"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
)

// TestCloudEventsRoundTrip runs the CloudEvents round trip
// (consumetest.RunCloudEventsRoundTrip) through NATS JetStream and
// consume/nats: the identity comes from ce-id, ce-type and ce-subject;
// copies published by hand with the ce- attributes only (no
// txbox-event-id, no Nats-Msg-Id) are recognised as duplicates by ce-id.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	p := consumetest.NewPipeline(t, "nats-ce")
	snd, err := natssender.New(natssender.Config{URL: testenv.NATSURL, CloudEvents: sender.CloudEvents{Source: "/orders"}})
	if err != nil {
		t.Fatal(err)
	}
	p.RunCloudEventsRoundTrip(t, consumetest.CloudEventsRoundTrip{
		Sender: snd,
		Route:  sender.Route{Subject: subject, Format: sender.FormatCloudEvents},
		Prefix: consume.PrefixHTTP,
		Consumer: func(h inbox.Handler) func(context.Context) error {
			cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: h, Concurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			return cons.Run
		},
		Copy: func(id txbox.ID) {
			m := natsgo.NewMsg(subject)
			m.Data = []byte(`{"copy":true}`)
			m.Header.Set("ce-specversion", "1.0")
			m.Header.Set("ce-id", id.String())
			m.Header.Set("ce-source", "/elsewhere")
			m.Header.Set("ce-type", "order-created")
			m.Header.Set("ce-subject", "order-copy")
			if _, err := js.PublishMsg(context.Background(), m); err != nil {
				t.Fatal(err)
			}
		},
	})
}
