package kafka_test

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/internal/consumetest"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/sender"
	kafkasender "github.com/txbox/txbox/sender/kafka"
)

// TestCloudEventsRoundTrip: outbox → relay (the sender's format
// cloudevents) → Kafka (kfake) → consume/kafka → inbox. Every committed
// event has exactly one effect, its inbox id, type and key taken from
// ce_id, ce_type and ce_subject; copies produced by hand with the ce_
// attributes only are recognised as duplicates by ce_id.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	p := consumetest.NewPipeline(t, "kafka-ce")
	p.Publish(t, "order-created", 20, 5, 4)

	snd, err := kafkasender.New(kafkasender.Config{Brokers: c.ListenAddrs(), CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEvents}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = snd.Close(context.Background()) })
	p.StartRelay(t, snd, sender.Route{Topic: topic}, 2*time.Second)

	check := p.CloudEvents(consume.PrefixKafka)
	cons, err := kafka.New(consumer(t, c, "ce", kgo.DisableAutoCommit()), kafka.Config{Inbox: p.Inbox, Handler: check.Handler})
	if err != nil {
		t.Fatal(err)
	}
	consumetest.RunConsumer(t, cons.Run)
	p.WaitDelivered(t, consumetest.E2ETimeout())
	check.Copies(t, func(id txbox.ID) {
		produce(t, c, []*kgo.Record{{Key: []byte("order-copy"), Value: []byte(`{"copy":true}`), Headers: []kgo.RecordHeader{
			{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id.String())},
			{Key: "ce_source", Value: []byte("/elsewhere")}, {Key: "ce_type", Value: []byte("order-created")},
		}}})
	})
}
