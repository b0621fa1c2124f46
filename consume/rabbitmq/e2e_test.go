package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	rabbitsender "github.com/txbox/txbox/sender/rabbitmq"
)

// TestEndToEnd runs the end-to-end scenario (consumetest.RunEndToEnd)
// through RabbitMQ and consume/rabbitmq; the events delivered again by
// hand are published to the queue anew.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q, exchange := orderQueue(t, conn)
	snd, err := rabbitsender.New(rabbitsender.Config{URL: testenv.RabbitURL})
	if err != nil {
		t.Fatal(err)
	}
	p := consumetest.NewPipeline(t, "rabbit-e2e")
	p.RunEndToEnd(t, consumetest.EndToEnd{
		Sender: snd,
		Route:  sender.Route{Exchange: exchange, RoutingKey: "{event_type}"},
		Consumer: func() func(context.Context) error {
			cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: p.Inbox, Handler: p.Handler, Queue: q, Concurrency: 4})
			if err != nil {
				t.Fatal(err)
			}
			return cons.Run
		},
		Redeliver: func(ids []txbox.ID) {
			ch := channel(t, conn)
			for _, id := range ids {
				publish(t, ch, q, id, true)
			}
		},
	})
}

const exchangeEnv = "TXBOX_CONSUMETEST_EXCHANGE"

// TestRelayChildProcess is the relay process of TestEndToEndRelayKilled;
// it does nothing in a normal run.
func TestRelayChildProcess(t *testing.T) {
	consumetest.RelayChild(t, func(getenv func(string) string) (sender.Sender, sender.Route) {
		s, err := rabbitsender.New(rabbitsender.Config{URL: testenv.RabbitURL})
		if err != nil {
			t.Fatal(err)
		}
		return s, sender.Route{Exchange: getenv(exchangeEnv), RoutingKey: "{event_type}"}
	})
}

// TestEndToEndRelayKilled: the relay runs as a separate OS process and is
// SIGKILLed while it delivers (possibly between the broker's confirm and
// marking the rows done); a second relay process takes over after the
// lease. RabbitMQ does not deduplicate, so every resend reaches the
// consumer: the inbox alone keeps the effects at exactly one per event.
func TestEndToEndRelayKilled(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q, exchange := orderQueue(t, conn)
	p := consumetest.NewPipeline(t, "rabbit-kill")
	n := consumetest.E2EEvents()
	const perTx = 10
	p.Publish(t, "order-created", n/perTx, perTx, 7)

	cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: p.Inbox, Handler: p.Handler, Queue: q})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	defer cancel()

	env := map[string]string{exchangeEnv: exchange}
	kill1 := p.StartRelayProcess(t, "TestRelayChildProcess", env)
	// Kill it as soon as an event was handled while its row is still in
	// process: its batch is confirmed by RabbitMQ but (the child holds each
	// batch until one of its events is handled) not yet marked done, so the second relay sends it again. (Waiting for a
	// number of effects instead lost the race when the relay outran a
	// consumer slowed by a loaded machine.)
	p.WaitDeliveredNotFinished(t, 60*time.Second)
	kill1()
	p.StartRelayProcess(t, "TestRelayChildProcess", env)
	p.WaitDelivered(t, consumetest.E2ETimeout())
	// The resends of the killed relay's batches may still be queued: once
	// the outbox is empty they are all in the queue, so one more event,
	// handled in order after them (one worker), proves they were handled
	// too; the oracle then runs again over everything.
	p.WaitOutboxAtMost(t, 0, consumetest.E2ETimeout())
	p.Publish(t, "order-created", 1, 1, 0)
	p.WaitDelivered(t, consumetest.E2ETimeout())
	if p.Results()[inbox.Duplicate] == 0 {
		t.Error("no duplicate reached the inbox: the kill did not hit the window between confirm and finish")
	}
	cancel()
	<-done
}
