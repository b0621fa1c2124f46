package kafka_test

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
)

// A sender built from plain configuration, sending one batch. The relay
// does this for every claimed batch; here an in-process cluster stands in
// for Kafka.
func Example() {
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "orders"))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()

	s, err := kafka.New(kafka.Config{
		Brokers:         cluster.ListenAddrs(),
		DeliveryTimeout: 5 * time.Second, // an outage fails a Send after this long
	})
	if err != nil {
		panic(err)
	}
	defer s.Close(context.Background())

	msgs := []*sender.Message{
		{ID: txbox.NewID(), EventType: "order-created", Key: "order-1", Payload: []byte(`{"id":1}`), Route: sender.Route{Topic: "orders"}},
		{ID: txbox.NewID(), EventType: "order-created", Key: "order-2", Payload: []byte(`{"id":2}`), Route: sender.Route{Topic: "nowhere"}},
	}
	err = s.Send(context.Background(), msgs)
	for i, e := range sender.Results(err, len(msgs)) {
		if e == nil {
			fmt.Printf("message %d: acked\n", i)
		} else {
			fmt.Printf("message %d: %v\n", i, txbox.Classify(e))
		}
	}
	// Output:
	// message 0: acked
	// message 1: rejected
}
