package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/consumetest"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
)

// TestCloudEventsRoundTrip: outbox → relay (format cloudevents) → NATS
// JetStream → consume/nats → inbox. Every committed event has exactly one
// effect, its inbox id, type and key taken from ce-id, ce-type and
// ce-subject; copies published by hand with the ce- attributes only (no
// txbox-event-id, no Nats-Msg-Id) are recognised as duplicates by ce-id.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	p := consumetest.NewPipeline(t, "nats-ce")
	p.Publish(t, "order-created", 20, 5, 4)

	snd, err := natssender.New(natssender.Config{URL: testenv.NATSURL, CloudEvents: sender.CloudEvents{Source: "/orders"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	p.StartRelay(t, snd, sender.Route{Subject: subject, Format: sender.FormatCloudEvents}, 2*time.Second)

	check := p.CloudEvents(consume.PrefixHTTP)
	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: check.Handler, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunConsumer(t, cons.Run)
	p.WaitDelivered(t, consumetest.E2ETimeout())

	check.Copies(t, func(id txbox.ID) {
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
	})
}
