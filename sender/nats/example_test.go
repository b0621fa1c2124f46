package nats_test

import (
	"context"
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
)

// New does not need the server to be up: it connects in the background,
// and Send reports a transient error until it is connected.
func ExampleNew() {
	s, err := txnats.New(txnats.Config{
		URL:        "nats://127.0.0.1:1", // nothing listens here
		AckTimeout: 5 * time.Second,
	})
	fmt.Println(err)
	msg := &sender.Message{
		ID:        txbox.NewID(),
		EventType: "order-created",
		Payload:   []byte(`{"order":42}`),
		Route:     sender.Route{Subject: "orders.created"},
	}
	err = s.Send(context.Background(), []*sender.Message{msg})
	fmt.Println(err)
	fmt.Println(s.Close(context.Background()))

	_, err = txnats.New(txnats.Config{})
	fmt.Println(err)
	// Output:
	// <nil>
	// nats: not connected
	// <nil>
	// nats: invalid url: is required
}
