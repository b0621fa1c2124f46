package config_test

import (
	"fmt"

	"github.com/txbox/txbox/config"
)

func ExampleLoad() {
	yml := `
senders:
  main: { type: nats, url: "nats://127.0.0.1:4222" }
defaults:
  route: { subject: "events.{event_type}" }
events:
  order-created: { batch-size: 500, polling: { max-delay: 5s } }
`
	c, err := config.Load(config.Source{Name: "txbox.yaml", YAML: []byte(yml), Env: []string{"TXBOX_DEFAULTS_MAX_ATTEMPTS=6"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := c.Effective("order-created")
	fmt.Println(*s.Sender, s.Route.Subject, *s.BatchSize, *s.Polling.MinDelay, *s.Polling.MaxDelay, *s.MaxAttempts)
	// Output: main events.{event_type} 500 250ms 5s 6
}

func ExampleLoad_error() {
	_, err := config.Load(config.Source{Name: "txbox.yaml", YAML: []byte("senders:\n  main: { type: natz }\n")})
	fmt.Println(err)
	// Output: config: txbox.yaml:2: senders.main.type: unknown sender type "natz" (valid: kafka, nats, rabbitmq, redis, webhook)
}

func ExampleRedactDSN() {
	fmt.Println(config.RedactDSN("postgres://app:s3cret@db:5432/app?sslmode=require"))
	fmt.Println(config.DSN("root:s3cret@tcp(db:3306)/app"))
	// Output:
	// postgres://app:xxxxx@db:5432/app?sslmode=require
	// root:xxxxx@tcp(db:3306)/app
}
