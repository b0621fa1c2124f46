package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	kafkasender "github.com/txbox/txbox/sender/kafka"
)

// TestCloudEventsRoundTrip runs the CloudEvents round trip
// (consumetest.RunCloudEventsRoundTrip) through Kafka (kfake) and
// consume/kafka, the sender's format cloudevents: the identity comes from
// ce_id, ce_type and ce_subject; copies produced by hand with the ce_
// attributes only are recognised as duplicates by ce_id.
func TestCloudEventsRoundTrip(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	p := consumetest.NewPipeline(t, "kafka-ce")
	snd, err := kafkasender.New(kafkasender.Config{Brokers: c.ListenAddrs(), CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEvents}})
	if err != nil {
		t.Fatal(err)
	}
	p.RunCloudEventsRoundTrip(t, consumetest.CloudEventsRoundTrip{
		Sender: snd,
		Route:  sender.Route{Topic: topic},
		Prefix: consume.PrefixKafka,
		Consumer: func(h inbox.Handler) func(context.Context) error {
			cons, err := kafka.New(consumer(t, c, "ce", kgo.DisableAutoCommit()), kafka.Config{Inbox: p.Inbox, Handler: h})
			if err != nil {
				t.Fatal(err)
			}
			return cons.Run
		},
		Copy: func(id txbox.ID) {
			produce(t, c, []*kgo.Record{{Key: []byte("order-copy"), Value: []byte(`{"copy":true}`), Headers: []kgo.RecordHeader{
				{Key: "ce_specversion", Value: []byte("1.0")}, {Key: "ce_id", Value: []byte(id.String())},
				{Key: "ce_source", Value: []byte("/elsewhere")}, {Key: "ce_type", Value: []byte("order-created")},
			}}})
		},
	})
}
