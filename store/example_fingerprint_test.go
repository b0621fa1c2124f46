package store_test

import (
	"fmt"

	"github.com/txbox/txbox/store"
)

// Two dead letters refused by a webhook receiver for different orders,
// and one whose receiver failed, fall in two failure groups: the order
// number and the port are variable parts, the status code is not.
func ExampleNormalizeError() {
	for _, e := range []string{
		"webhook: POST http://127.0.0.1:33319/orders: 422 Unprocessable Entity: Unprocessable Entity: order 1234 unknown",
		"webhook: POST http://127.0.0.1:44973/orders: 422 Unprocessable Entity: Unprocessable Entity: order 98 unknown",
		"webhook: POST http://127.0.0.1:44973/orders: 500 Internal Server Error",
		`rabbitmq sender: message returned as unroutable: no queue bound for exchange "amq.direct" routing key "fp-nobody-bound" (event 01a24e59-1187-7eb0-85c0-9317f7500645)`,
	} {
		fmt.Println(store.NormalizeError(e))
	}
	// Output:
	// webhook: POST http://<addr>/orders: 422 Unprocessable Entity: Unprocessable Entity: order <n> unknown
	// webhook: POST http://<addr>/orders: 422 Unprocessable Entity: Unprocessable Entity: order <n> unknown
	// webhook: POST http://<addr>/orders: 500 Internal Server Error
	// rabbitmq sender: message returned as unroutable: no queue bound for exchange <q> routing key <q> (event <uuid>)
}

// The key of a failure group is what a dead letter would store in an
// indexed column: the same for every dead letter of the group.
func ExampleFingerprint_Key() {
	a := store.NewFingerprint("orders", "order-created", store.FailureAttemptsExhausted,
		"redisstream sender: route has no stream (event 01a24e58-f9ea-7a44-86f1-f7045c1e16b5, type \"order-created\")")
	b := store.NewFingerprint("orders", "order-created", store.FailureAttemptsExhausted,
		"redisstream sender: route has no stream (event 01a24e5a-b26e-74ce-9be6-cb85af4b2215, type \"order-created\")")
	fmt.Println(a.Message)
	fmt.Println(a.Key() == b.Key(), len(a.Key()))
	// Output:
	// redisstream sender: route has no stream (event <uuid>, type <q>)
	// true 16
}
