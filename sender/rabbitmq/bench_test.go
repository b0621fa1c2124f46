package rabbitmq_test

import (
	"context"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

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
	conn, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	ex, q := testenv.UniqueName("bench_ex_"), testenv.UniqueName("bench_q_")
	if err := ch.ExchangeDeclare(ex, "direct", false, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	// A short queue that drops its head: the broker routes and stores every
	// message, but the benchmark does not fill the disk.
	if _, err := ch.QueueDeclare(q, false, false, false, false, amqp.Table{"x-max-length": int32(1000)}); err != nil {
		b.Fatal(err)
	}
	if err := ch.QueueBind(q, "rk", ex, false, nil); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_, _ = ch.QueueDelete(q, false, false, false)
		_ = ch.ExchangeDelete(ex, false, false)
	}()
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
