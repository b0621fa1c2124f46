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

// Where each value came from, for `txbox config print`: the file's line,
// the environment variable, or the defaults an event type inherits.
func ExampleConfig_Settings() {
	yml := `database: { dialect: postgres, dsn: "postgres://app:secret@db/app" }
events:
  order-created: { batch-size: 500 }
`
	c, err := config.Load(config.Source{Name: "txbox.yaml", YAML: []byte(yml), Env: []string{"TXBOX_DEFAULTS_MAX_ATTEMPTS=6"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, s := range c.Settings() {
		switch s.Path {
		case "database.dsn", "defaults.max-attempts", "defaults.lease", "events.order-created.batch-size", "events.order-created.max-attempts":
			fmt.Printf("%s = %s (%s)\n", s.Path, s.Value, s.Source)
		}
	}
	// Output:
	// database.dsn = postgres://app:xxxxx@db/app (file txbox.yaml:1)
	// defaults.max-attempts = 6 (environment variable TXBOX_DEFAULTS_MAX_ATTEMPTS)
	// defaults.lease = 5m0s (default)
	// events.order-created.batch-size = 500 (file txbox.yaml:3)
	// events.order-created.max-attempts = 6 (inherited from defaults.max-attempts (environment variable TXBOX_DEFAULTS_MAX_ATTEMPTS))
}

// A secret written in the file is refused with its key path; *-env and
// *-file keys say where it is instead. CheckSenders then reads what they
// point to, without connecting.
func ExampleConfig_CheckSenders() {
	_, err := config.Load(config.Source{Name: "txbox.yaml", YAML: []byte(`senders:
  events: { type: kafka, brokers: [kafka:9093], sasl: { mechanism: scram-sha-512, username: txbox, password: hunter2 } }
`)})
	fmt.Println(err)

	c, _ := config.Load(config.Source{Name: "txbox.yaml", YAML: []byte(`senders:
  events: { type: kafka, brokers: [kafka:9093], sasl: { mechanism: scram-sha-512, username: txbox, password-env: KAFKA_PASSWORD } }
`)})
	fmt.Println(c.CheckSenders(func(string) string { return "" }, nil))
	fmt.Println(c.CheckSenders(func(string) string { return "s3cret" }, nil))
	// Output:
	// config: txbox.yaml:2: senders.events.sasl.password: secrets are not written in the configuration: use password-env or password-file
	// senders.events.sasl.password-env: environment variable KAFKA_PASSWORD is empty
	// <nil>
}
