package consume_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox/consume"
)

// NewMessage turns what a broker delivered into an inbox.Message. A
// custom adapter for another broker uses it: a message without a valid
// event id is an *InvalidMessageError, which no redelivery can fix.
func ExampleNewMessage() {
	m, err := consume.NewMessage("01a23222-b9a0-77df-a986-eb4db2db4912", "order-created", "order-1",
		[]byte(`{"id":1}`), map[string]string{"txbox-event-id": "01a23222-b9a0-77df-a986-eb4db2db4912"})
	fmt.Println(m.ID, m.Type, m.Key, string(m.Payload), err)

	_, err = consume.NewMessage("", "order-created", "", nil, nil)
	var invalid *consume.InvalidMessageError
	fmt.Println(errors.As(err, &invalid))
	// Output:
	// 01a23222-b9a0-77df-a986-eb4db2db4912 order-created order-1 {"id":1} <nil>
	// true
}

// The adapters space the retries of a failing message with a Backoff:
// Min doubled per failure, capped at Max.
func ExampleBackoff_Delay() {
	b, err := consume.Backoff{Min: 100 * time.Millisecond, Max: time.Second}.Normalize()
	if err != nil {
		fmt.Println(err)
		return
	}
	var delays []time.Duration
	for attempt := 1; attempt <= 5; attempt++ {
		delays = append(delays, b.Delay(attempt))
	}
	fmt.Println(delays)
	_, err = consume.Backoff{Min: time.Second, Max: time.Millisecond}.Normalize()
	fmt.Println(err)
	// Output:
	// [100ms 200ms 400ms 800ms 1s]
	// consume: Backoff.Max 1ms is below Min 1s
}
