package nats_test

import (
	"context"
	"errors"
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
	// The error names the server and, once the first dial failed, why:
	// "nats: not connected to nats://127.0.0.1:1 (last error: dial tcp
	// 127.0.0.1:1: connect: connection refused)".
	err = s.Send(context.Background(), []*sender.Message{msg})
	fmt.Println(errors.Is(err, txnats.ErrNotConnected), txbox.Classify(err), sender.IsDisconnected(err))
	fmt.Println(s.Close(context.Background()))

	_, err = txnats.New(txnats.Config{})
	fmt.Println(err)
	// Output:
	// <nil>
	// true transient true
	// <nil>
	// nats: invalid url: is required
}
