package kafka_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
)

// TestProvisionCreatesTopics: a cluster without the routes' topics (and
// without auto-creation) rejects every record; with Provision the topics
// exist, with the configured partitions, and records go through.
func TestProvisionCreatesTopics(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "existing"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), ProvisionPartitions: 3, DeliveryTimeout: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	routes := []sender.Route{{Topic: "orders"}, {Topic: "payments"}, {Topic: "orders"}, {Topic: "existing"}, {Topic: "{event_type}"}, {Subject: "not-kafka"}}
	if err := s.Provision(ctx, routes); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	td, err := kadm.NewClient(cl).ListTopics(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for topic, parts := range map[string]int{"orders": 3, "payments": 3, "existing": 1} {
		d, ok := td[topic]
		if !ok || d.Err != nil {
			t.Fatalf("topic %s after Provision: %+v", topic, d)
		}
		if len(d.Partitions) != parts {
			t.Fatalf("topic %s has %d partitions, want %d (an existing topic is left as it is)", topic, len(d.Partitions), parts)
		}
	}
	if _, ok := td["{event_type}"]; ok {
		t.Fatal("a topic named after the placeholder was created")
	}
	// Idempotent: a restart provisions again without an error.
	if err := s.Provision(ctx, routes); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	msgs := messages(4, "orders")
	msgs[3].Route.Topic = "payments"
	if err := s.Send(ctx, msgs); err != nil {
		t.Fatalf("Send after Provision: %v", err)
	}
}

func TestProvisionErrors(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	// More replicas than brokers: the cluster refuses, and the error says
	// which topic.
	s, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), ProvisionReplicationFactor: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Provision(ctx, []sender.Route{{Topic: "orders"}}); err == nil || !strings.Contains(err.Error(), `"orders"`) {
		t.Fatalf("Provision with 3 replicas on 1 broker = %v, want an error naming the topic", err)
	}
	if err := s.Provision(ctx, []sender.Route{{Topic: "{event_type}"}}); err == nil || !strings.Contains(err.Error(), "no route names a topic") {
		t.Fatalf("Provision without a topic = %v", err)
	}
	if _, err := kafka.New(kafka.Config{Brokers: c.ListenAddrs(), ProvisionPartitions: -2}); err == nil {
		t.Fatal("New with provision-partitions -2 succeeded")
	}
}
