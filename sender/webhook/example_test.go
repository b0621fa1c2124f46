package webhook_test

import (
	"fmt"
	"time"

	"github.com/txbox/txbox/sender/webhook"
)

// A receiver checks the signature header on the raw body before trusting
// the request.
func ExampleVerify() {
	body := []byte(`{"order":42}`)
	header := webhook.Sign("whsec-shared", time.Now(), body)

	fmt.Println(webhook.Verify("whsec-shared", header, body, webhook.DefaultTolerance))
	fmt.Println(webhook.Verify("whsec-shared", header, []byte(`{"order":1}`), webhook.DefaultTolerance))
	fmt.Println(webhook.Verify("whsec-shared", "", body, webhook.DefaultTolerance))
	// Output:
	// <nil>
	// webhook: signature does not match
	// webhook: signature header missing
}

func ExampleNew() {
	s, err := webhook.New(webhook.Config{
		Timeout:        5 * time.Second,
		MaxConcurrency: 8,
		Secret:         "whsec-shared",
	})
	fmt.Println(s != nil, err)
	_, err = webhook.New(webhook.Config{MaxConcurrency: -1})
	fmt.Println(err)
	// Output:
	// true <nil>
	// webhook: invalid max-concurrency: must not be negative
}
