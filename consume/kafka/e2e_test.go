package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/consume/internal/consumetest"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/sender"
	kafkasender "github.com/txbox/txbox/sender/kafka"
)

// TestEndToEnd: business transactions (some rolled back) → outbox → relay
// → Kafka (kfake) → consume/kafka → inbox → handler writing an effect row
// in the same PostgreSQL transaction. The relay is stopped abruptly half
// way and a second one takes over after the lease; a slice of events is
// produced again by hand. Every committed event has exactly one effect.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	p := consumetest.NewPipeline(t, "kafka-e2e")
	n := consumetest.E2EEvents()
	const perTx = 10
	p.Publish(t, "order-created", n/perTx/2, perTx, 7)

	snd, err := kafkasender.New(kafkasender.Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	route := sender.Route{Topic: topic}
	stop1 := p.StartRelay(t, snd, route, 2*time.Second)

	cl := consumer(t, c, "e2e", kgo.DisableAutoCommit())
	cons, err := kafka.New(cl, kafka.Config{Inbox: p.Inbox, Handler: p.Handler})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	defer cancel()

	p.Publish(t, "order-created", n/perTx/2, perTx, 7)
	stop1(time.Millisecond)
	p.StartRelay(t, snd, route, 2*time.Second)

	committed := p.Committed()
	var again []*kgo.Record
	for _, id := range committed[:len(committed)/10] {
		again = append(again, record(id))
	}
	produce(t, c, again)
	p.WaitDelivered(t, consumetest.E2ETimeout())
	cancel()
	<-done
}
