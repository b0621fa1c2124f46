package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/internal/consumetest"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
)

// TestEndToEnd: business transactions (some rolled back) → outbox → relay
// → NATS JetStream → consume/nats → inbox → handler writing an effect row
// in the same PostgreSQL transaction. The relay is stopped abruptly half
// way and a second one takes over after the lease; a slice of events is
// re-published by hand without Nats-Msg-Id (so JetStream cannot drop it).
// Every committed event has exactly one effect; rolled-back ones none.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	js, subject, jc := stream(t)
	p := consumetest.NewPipeline(t, "nats-e2e")
	n := consumetest.E2EEvents()
	const perTx = 10
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)

	snd, err := natssender.New(natssender.Config{URL: testenv.NATSURL, AckTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	route := sender.Route{Subject: subject}
	stop1 := p.StartRelay(t, snd, route, 2*time.Second)

	cons, err := cnats.New(jc, cnats.Config{Inbox: p.Inbox, Handler: p.Handler, Concurrency: 4})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	defer cancel()

	// The second half is published while the first relay runs; it is
	// stopped mid-run with no time to finish its batches.
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)
	stop1(time.Millisecond)
	p.StartRelay(t, snd, route, 2*time.Second)

	committed := p.Committed()
	for _, id := range committed[:len(committed)/10] {
		m := natsgo.NewMsg(subject)
		m.Data = []byte(`{"redelivered":true}`)
		m.Header.Set(txbox.HeaderEventID, id.String())
		if _, err := js.PublishMsg(context.Background(), m); err != nil {
			t.Fatal(err)
		}
	}
	p.WaitDelivered(t, consumetest.E2ETimeout())
	cancel()
	<-done
}
