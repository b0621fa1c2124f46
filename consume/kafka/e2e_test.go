package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	kafkasender "github.com/txbox/txbox/sender/kafka"
)

// TestEndToEnd runs the end-to-end scenario (consumetest.RunEndToEnd)
// through Kafka (kfake) and consume/kafka; the events delivered again by
// hand are produced anew.
func TestEndToEnd(t *testing.T) {
	t.Parallel()
	c := cluster(t)
	snd, err := kafkasender.New(kafkasender.Config{Brokers: c.ListenAddrs()})
	if err != nil {
		t.Fatal(err)
	}
	p := consumetest.NewPipeline(t, "kafka-e2e")
	p.RunEndToEnd(t, consumetest.EndToEnd{
		Sender: snd,
		Route:  sender.Route{Topic: topic},
		Consumer: func() func(context.Context) error {
			cons, err := kafka.New(consumer(t, c, "e2e", kgo.DisableAutoCommit()), kafka.Config{Inbox: p.Inbox, Handler: p.Handler})
			if err != nil {
				t.Fatal(err)
			}
			return cons.Run
		},
		Redeliver: func(ids []txbox.ID) {
			var again []*kgo.Record
			for _, id := range ids {
				again = append(again, record(id))
			}
			produce(t, c, again)
		},
	})
}
