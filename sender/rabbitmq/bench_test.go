package rabbitmq_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox/internal/amqptest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/sendertest"
)

// BenchmarkSendVsRaw sends the same batch of 200 messages (the relay's
// default batch size) through the txbox sender and through a bare
// amqp091 channel in confirm mode publishing the same messages the same
// way (mandatory, persistent, deferred confirms, wait for all), alternating
// the two in every iteration so both see the same machine load. It reports
// each side's rate and the ratio sender/raw of their total times.
func BenchmarkSendVsRaw(b *testing.B) {
	const batch = 200
	ch := amqptest.Admin(b)
	// A short queue that drops its head: the broker routes and stores every
	// message, but the benchmark does not fill the disk.
	ex, _ := amqptest.Bound(b, ch, "rk", amqp.Table{"x-max-length": int32(1000)})
	if err := ch.Confirm(false); err != nil {
		b.Fatal(err)
	}

	s, err := rabbitmq.New(rabbitmq.Config{URL: testenv.RabbitURL, Channels: 1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	msgs := sendertest.NewMessages(batch, sender.Route{Exchange: ex, RoutingKey: "rk"})

	rawBatch := func() {
		dcs := make([]*amqp.DeferredConfirmation, len(msgs))
		for i, m := range msgs {
			h := make(amqp.Table, len(m.Headers))
			for k, v := range m.Headers {
				h[k] = v
			}
			dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), ex, "rk", true, false, amqp.Publishing{
				Headers: h, DeliveryMode: amqp.Persistent, MessageId: m.ID.String(), Type: m.EventType,
				Timestamp: m.CreatedAt, Body: m.Payload,
			})
			if err != nil {
				b.Fatal(err)
			}
			dcs[i] = dc
		}
		for _, dc := range dcs {
			if !dc.Wait() {
				b.Fatal("nack")
			}
		}
	}
	sendertest.SendVsRaw(b, s, msgs, rawBatch)
}
