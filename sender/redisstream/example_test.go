package redisstream_test

import (
	"context"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/redisstream"
)

// A sender that appends to a stream per event type, trimmed to about
// 100,000 entries.
func Example() {
	s, err := redisstream.New(redisstream.Config{Addr: "127.0.0.1:6379", MaxLen: 100_000})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	route := sender.Route{Stream: "events.{event_type}"}.Expand("order-created")
	msgs := []*sender.Message{{ID: txbox.NewID(), EventType: "order-created", Payload: []byte(`{"id":1}`), Route: route}}
	if err := s.Send(context.Background(), msgs); err != nil {
		log.Printf("send failed (%v): %v", txbox.Classify(err), err)
	}
}
