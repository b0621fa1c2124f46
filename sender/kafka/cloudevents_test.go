package kafka_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/IBM/sarama"
	cesarama "github.com/cloudevents/sdk-go/protocol/kafka_sarama/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/sendertest"
)

// TestCloudEventsReadBySDK sends in the cloudevents format to kfake,
// consumes the records with sarama and decodes each with the CloudEvents
// Go SDK's Kafka (sarama) binding: every attribute and the data bytes
// must be the event's. The binding adds the record's topic, partition and
// offset as extensions, which are dropped before the comparison.
func TestCloudEventsReadBySDK(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEvents, Source: "/orders"}}, "ce-orders")
	msgs := messages(4, b.topic)
	msgs[0].Headers[txbox.HeaderTraceParent] = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	msgs[1].Headers["Content-Type"] = "application/json"
	for i, err := range sender.Results(b.sender.Send(context.Background(), msgs), len(msgs)) {
		if err != nil {
			t.Fatalf("message %d: %v", i, err)
		}
	}
	byID := map[string]*sender.Message{}
	for _, m := range msgs {
		byID[m.ID.String()] = m
	}

	cfg := sarama.NewConfig()
	cfg.Version = sarama.V2_8_0_0
	cfg.Consumer.Return.Errors = true
	c, err := sarama.NewConsumer(b.cluster.ListenAddrs(), cfg)
	if err != nil {
		t.Fatalf("sarama consumer on kfake: %v", err)
	}
	t.Cleanup(func() { _ = c.Close() })
	parts, err := c.Partitions(b.topic)
	if err != nil {
		t.Fatal(err)
	}
	got := 0
	for _, p := range parts {
		pc, err := c.ConsumePartition(b.topic, p, sarama.OffsetOldest)
		if err != nil {
			t.Fatal(err)
		}
		hw := pc.HighWaterMarkOffset()
		for n := int64(0); n < hw; n++ {
			var cm *sarama.ConsumerMessage
			select {
			case cm = <-pc.Messages():
			case err := <-pc.Errors():
				t.Fatalf("partition %d: %v", p, err)
			case <-time.After(15 * time.Second):
				t.Fatalf("partition %d: no record %d of %d", p, n, hw)
			}
			e, err := binding.ToEvent(context.Background(), cesarama.NewMessageFromConsumerMessage(cm))
			if err != nil {
				t.Fatalf("the SDK cannot decode the record: %v", err)
			}
			m := byID[e.ID()]
			if m == nil {
				t.Fatalf("record with unknown id %q", e.ID())
			}
			dropKafkaExtensions(e)
			sendertest.CheckCloudEvent(t, *e, m, "/orders", sender.DefaultDataContentType)
			got++
		}
		_ = pc.Close()
	}
	if got != len(msgs) {
		t.Fatalf("read %d of %d records", got, len(msgs))
	}
}

// dropKafkaExtensions removes what the sarama binding adds of its own.
func dropKafkaExtensions(e *event.Event) {
	for _, x := range []string{"kafkatopic", "kafkapartition", "kafkaoffset", "kafkamessagekey"} {
		_ = e.Context.SetExtension(x, nil)
	}
}

// TestCloudEventsHeaders checks the record itself against the Kafka
// binding: ce_ headers, content-type, the record key still the event key.
func TestCloudEventsHeaders(t *testing.T) {
	t.Parallel()
	b := setup(t, kafka.Config{}, "ce-headers")
	msgs := messages(2, b.topic)
	for _, m := range msgs {
		m.Route.Format = sender.FormatCloudEvents
	}
	if err := b.sender.Send(context.Background(), msgs); err != nil {
		t.Fatal(err)
	}
	for _, r := range consume(t, b.cluster.ListenAddrs(), b.topic, len(msgs)) {
		id, _ := header(r, "ce_id")
		var m *sender.Message
		for _, c := range msgs {
			if c.ID.String() == id {
				m = c
			}
		}
		if m == nil {
			t.Fatalf("record without a known ce_id: %v", r.Headers)
		}
		for name, want := range sendertest.WantCloudEvent(m, sender.DefaultSource, sender.DefaultDataContentType) {
			h := kafka.HeaderPrefixCloudEvents + name
			if name == "datacontenttype" {
				h = kafka.HeaderContentType
			}
			if got, _ := header(r, h); got != want {
				t.Errorf("%s = %q, want %q", h, got, want)
			}
		}
		if m.Key != "" && string(r.Key) != m.Key {
			t.Errorf("record key %q, want %q", r.Key, m.Key)
		}
	}
	_, err := kafka.New(kafka.Config{Brokers: []string{"127.0.0.1:1"}, CloudEvents: sender.CloudEvents{Format: sender.FormatCloudEventsStructured}})
	if !errors.Is(err, kafka.ErrInvalidConfig) {
		t.Fatalf("structured on kafka: %v, want ErrInvalidConfig", err)
	}
}
