package rabbitmq_test

import (
	"context"
	"errors"
	"log"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/rabbitmq"
)

// A sender for the relay, and how a caller reads its outcome: an
// unroutable message is rejected (the relay counts an attempt), an outage
// is transient (the relay opens its circuit and counts nothing).
func Example() {
	s, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:guest@127.0.0.1:5672/"})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close(context.Background())

	msgs := []*sender.Message{{
		ID: txbox.NewID(), EventType: "order-created", Payload: []byte(`{"id":1}`),
		// The routing key defaults to the event type.
		Route: sender.Route{Exchange: "amq.topic"},
	}}
	for _, e := range sender.Results(s.Send(context.Background(), msgs), len(msgs)) {
		switch {
		case e == nil:
			log.Print("confirmed and routed")
		case errors.Is(e, rabbitmq.ErrUnroutable):
			log.Print("no queue is bound for order-created: ", txbox.Classify(e))
		case txbox.Classify(e) == txbox.ClassTransient:
			log.Print("broker unavailable, retry later: ", e)
		}
	}
}
