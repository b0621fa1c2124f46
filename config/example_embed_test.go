package config_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"

	"github.com/txbox/txbox/config"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
)

// The txbox command in a few lines, for a program that embeds the relay:
// load the file (with the environment and flag-style overrides), open the
// store and the senders it names, and build the relay from the same
// settings. Here the store is an SQLite file and the sender a webhook
// pointing at a local test server.
func ExampleConfig_RelayConfig() {
	ctx := context.Background()
	got := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		select { // a retry, if any, is not printed
		case got <- r.URL.Path + " " + r.Header.Get("Txbox-Event-Type") + " " + string(body):
		default:
		}
	}))
	defer srv.Close()

	dir, _ := os.MkdirTemp("", "config-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "txbox.yaml")
	yml := `database: { dialect: sqlite, dsn: ` + filepath.Join(dir, "app.db") + ` }
senders:
  hooks: { type: webhook, url: "` + srv.URL + `/events" }
`
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		fmt.Println(err)
		return
	}
	cfg, err := config.LoadFile(path, []string{"defaults.max-attempts=6"})
	if err != nil {
		fmt.Println(err)
		return
	}
	logger := slog.New(slog.DiscardHandler)
	st, err := cfg.OpenStore(ctx, os.Getenv, logger)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	if err := st.Migrate(ctx); err != nil { // or: txbox migrate
		fmt.Println(err)
		return
	}
	senders, err := cfg.OpenSenders(ctx, os.Getenv, logger)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer senders["hooks"].Close(ctx)
	r, err := relay.New(cfg.RelayConfig(st, senders, logger))
	if err != nil {
		fmt.Println(err)
		return
	}
	if err := r.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}
	defer r.Stop(ctx)

	// The application's side: publish in a transaction on the same store.
	pub, _ := outbox.NewPublisher(st, outbox.Config{OnPublish: func(types []string) { r.Wake(types...) }})
	tx, err := st.Begin(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := pub.PublishJSON(ctx, tx.Native(), "order-created", "order-1", map[string]int{"id": 1}); err != nil {
		fmt.Println(err)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(<-got)
	fmt.Println("max attempts:", *cfg.Effective("order-created").MaxAttempts)
	// Output:
	// /events order-created {"id":1}
	// max attempts: 6
}

// Load reports every problem of a file at once, in file order, each with
// its line and key path; config.Errors holds them for a program that
// wants the fields.
func ExampleErrors() {
	yml := `defaults:
  batch-size: 0
events:
  order-created:
    polling: { min-delay: 5s, max-delay: 1s }
`
	_, err := config.Load(config.Source{Name: "txbox.yaml", YAML: []byte(yml)})
	fmt.Println(errors.Is(err, config.ErrInvalid))
	var errs config.Errors
	if errors.As(err, &errs) {
		for _, e := range errs {
			fmt.Printf("line %d: %s: %s\n", e.Line, e.Path, e.Msg)
		}
	}
	// Output:
	// true
	// line 2: defaults.batch-size: must be between 1 and 10000
	// line 5: events.order-created.polling.max-delay: must be ≥ min-delay (1s < 5s)
}

// Default is the configuration of an empty file: what every key is
// before the file, the environment and the flags override it. The SQLite
// file's default is applied when the DSN is read.
func ExampleDefault() {
	c := config.Default()
	dsn, err := c.DatabaseDSN(os.Getenv)
	s := c.Effective("order-created")
	fmt.Println(c.Database.Dialect, dsn, err, *s.BatchSize, *s.MaxAttempts, *s.LeaseDuration, *s.Retention, *s.Claim)
	// Output: sqlite ./txbox.db <nil> 200 4 5m0s 0s lease
}

// LoadFile reads a file and applies the process environment (TXBOX_*
// variables) and then the overrides given as key=value, as the txbox
// command's --set flags do.
func ExampleLoadFile() {
	dir, _ := os.MkdirTemp("", "config-example")
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "txbox.yaml")
	_ = os.WriteFile(path, []byte(`senders:
  main: { type: redis, addr: "127.0.0.1:6379" }
defaults:
  route: { stream: "shop.{event_type}" }
events:
  order-created: { batch-size: 500 }
`), 0o600)

	c, err := config.LoadFile(path, []string{"events.order-created.batch-size=50"})
	if err != nil {
		fmt.Println(err)
		return
	}
	s := c.Effective("order-created")
	fmt.Println(c.SenderNames(), c.EventTypes(), *s.BatchSize, s.Route.Stream)
	// Output: [main] [order-created] 50 shop.{event_type}
}
