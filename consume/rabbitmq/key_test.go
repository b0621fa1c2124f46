package rabbitmq_test

import (
	"context"
	"testing"

	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	rabbitsender "github.com/txbox/txbox/sender/rabbitmq"
)

// TestKeyConformance: through RabbitMQ, in the headers and the
// CloudEvents format, inbox.Message.Key is the key each event was
// published with (the txbox-key header, the cloudEvents:subject
// attribute), and "" for an event without one, never the AMQP routing key
// (here the queue's name) (consumetest.RunKeyRoundTrip).
func TestKeyConformance(t *testing.T) {
	t.Parallel()
	for _, format := range []sender.Format{sender.FormatTxbox, sender.FormatCloudEvents} {
		t.Run(string(format), func(t *testing.T) {
			t.Parallel()
			conn := dial(t)
			q := queue(t, conn)
			p := consumetest.NewPipeline(t, "rabbit-key")
			check := p.Keys()
			snd, err := rabbitsender.New(rabbitsender.Config{URL: testenv.RabbitURL})
			if err != nil {
				t.Fatal(err)
			}
			cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: p.Inbox, Handler: check.Handler, Queue: q})
			if err != nil {
				t.Fatal(err)
			}
			p.RunKeyRoundTrip(t, snd, sender.Route{RoutingKey: q, Format: format}, check, func(ctx context.Context) error { return cons.Run(ctx) })
		})
	}
}
