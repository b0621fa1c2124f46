package sender_test

import (
	"fmt"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// The CloudEvents context of a message, as a sender in the cloudevents
// format sends it (each binding prefixes the names: ce- for NATS and
// HTTP, ce_ for Kafka, cloudEvents: for RabbitMQ), and the JSON envelope
// of the structured mode a webhook can use instead.
func ExampleCloudEvents_Event() {
	ce := sender.CloudEvents{Source: "/orders", DataContentType: "application/json"}
	m := &sender.Message{
		ID:        txbox.ID{0x01, 0x93, 0x2b, 0x6f, 0x4a, 0x10, 0x7c, 0x00, 0x80, 0, 0, 0, 0, 0, 0, 0x2a},
		EventType: "order-created",
		Key:       "order-42",
		Payload:   []byte(`{"total":12.5}`),
		Headers:   map[string]string{txbox.HeaderTraceParent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
		CreatedAt: time.Date(2026, 3, 1, 9, 30, 0, 123456000, time.UTC),
	}
	e := ce.Event(m)
	e.Attributes(func(name, value string) { fmt.Printf("%s: %s\n", name, value) })
	fmt.Println("datacontenttype:", e.DataContentType)
	body, _ := e.Structured(m.Payload)
	fmt.Println(string(body))
	// Output:
	// specversion: 1.0
	// id: 01932b6f-4a10-7c00-8000-00000000002a
	// source: /orders
	// type: order-created
	// subject: order-42
	// time: 2026-03-01T09:30:00.123456Z
	// traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01
	// datacontenttype: application/json
	// {"datacontenttype":"application/json","id":"01932b6f-4a10-7c00-8000-00000000002a","source":"/orders","specversion":"1.0","subject":"order-42","time":"2026-03-01T09:30:00.123456Z","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01","type":"order-created","data":{"total":12.5}}
}
