package rabbitmq_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	rabbitsender "github.com/txbox/txbox/sender/rabbitmq"
)

// TestCloudEventsRoundTrip runs the CloudEvents round trip
// (consumetest.RunCloudEventsRoundTrip) through RabbitMQ and
// consume/rabbitmq: the identity comes from the cloudEvents:id,
// cloudEvents:type and cloudEvents:subject headers; copies published by
// hand with those headers only (no txbox-event-id, no message id) are
// recognised as duplicates.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	ch := channel(t, conn)
	p := consumetest.NewPipeline(t, "rabbit-ce")
	snd, err := rabbitsender.New(rabbitsender.Config{URL: testenv.RabbitURL})
	if err != nil {
		t.Fatal(err)
	}
	p.RunCloudEventsRoundTrip(t, consumetest.CloudEventsRoundTrip{
		Sender: snd,
		Route:  sender.Route{RoutingKey: q, Format: sender.FormatCloudEvents},
		Prefix: consume.PrefixAMQP,
		Consumer: func(h inbox.Handler) func(context.Context) error {
			cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: p.Inbox, Handler: h, Queue: q, Concurrency: 2})
			if err != nil {
				t.Fatal(err)
			}
			return cons.Run
		},
		Copy: func(id txbox.ID) {
			err := ch.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte(`{"copy":true}`), Headers: amqp.Table{
				"cloudEvents:specversion": "1.0", "cloudEvents:id": id.String(), "cloudEvents:source": "/elsewhere",
				"cloudEvents:type": "order-created", "cloudEvents:subject": "order-copy",
			}})
			if err != nil {
				t.Fatal(err)
			}
		},
	})
}
