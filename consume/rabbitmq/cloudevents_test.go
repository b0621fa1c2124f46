package rabbitmq_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/consumetest"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	rabbitsender "github.com/txbox/txbox/sender/rabbitmq"
)

// TestCloudEventsRoundTrip: outbox → relay (format cloudevents) →
// RabbitMQ → consume/rabbitmq → inbox. Every committed event has exactly
// one effect, its inbox id, type and key taken from the cloudEvents:id,
// cloudEvents:type and cloudEvents:subject headers; copies published by
// hand with those headers only (no txbox-event-id, no message id) are
// recognised as duplicates.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	ch := channel(t, conn)
	p := consumetest.NewPipeline(t, "rabbit-ce")
	p.Publish(t, "order-created", 20, 5, 4)

	snd, err := rabbitsender.New(rabbitsender.Config{URL: testenv.RabbitURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	p.StartRelay(t, snd, sender.Route{RoutingKey: q, Format: sender.FormatCloudEvents}, 2*time.Second)

	check := p.CloudEvents(consume.PrefixAMQP)
	cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: p.Inbox, Handler: check.Handler, Queue: q, Concurrency: 2})
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunConsumer(t, cons.Run)
	p.WaitDelivered(t, consumetest.E2ETimeout())
	check.Copies(t, func(id txbox.ID) {
		err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte(`{"copy":true}`), Headers: amqp.Table{
			"cloudEvents:specversion": "1.0", "cloudEvents:id": id.String(), "cloudEvents:source": "/elsewhere",
			"cloudEvents:type": "order-created", "cloudEvents:subject": "order-copy",
		}})
		if err != nil {
			t.Fatal(err)
		}
	})
}
