package kafka_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/sender"
	kafkasender "github.com/txbox/txbox/sender/kafka"
)

// TestKeyConformance: through Kafka (kfake), in the headers and the
// CloudEvents format, inbox.Message.Key is the key each event was
// published with (the record key, the ce_subject attribute), and "" for
// an event without one (consumetest.RunKeyRoundTrip).
func TestKeyConformance(t *testing.T) {
	t.Parallel()
	for _, format := range []sender.Format{sender.FormatTxbox, sender.FormatCloudEvents} {
		t.Run(string(format), func(t *testing.T) {
			t.Parallel()
			c := cluster(t)
			p := consumetest.NewPipeline(t, "kafka-key")
			check := p.Keys()
			snd, err := kafkasender.New(kafkasender.Config{Brokers: c.ListenAddrs()})
			if err != nil {
				t.Fatal(err)
			}
			cons, err := kafka.New(consumer(t, c, "key", kgo.DisableAutoCommit()), kafka.Config{Inbox: p.Inbox, Handler: check.Handler})
			if err != nil {
				t.Fatal(err)
			}
			p.RunKeyRoundTrip(t, snd, sender.Route{Topic: topic, Format: format}, check, func(ctx context.Context) error { return cons.Run(ctx) })
		})
	}
}
