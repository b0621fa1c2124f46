package relay_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/sqlite"
)

// Validate reports every problem of a configuration at once, each with
// the Go path of its field (ConfigError), without opening anything; New
// runs the same checks and refuses to build the relay.
func ExampleConfig_Validate() {
	cfg := relay.Config{
		Defaults: relay.EventSettings{
			BatchSize: new(0),
			Polling:   &relay.PollingSettings{MinDelay: new(5 * time.Second), MaxDelay: new(time.Second)},
		},
		Events: map[string]relay.EventSettings{
			"order-created": {MaxAttempts: new(0)},
		},
	}
	for _, e := range cfg.Validate(relay.Bounds{}) {
		fmt.Println(e)
	}
	_, err := relay.New(cfg)
	fmt.Println(errors.Is(err, txbox.ErrInvalidConfig))
	// Output:
	// relay: Defaults.BatchSize must be ≥ 1
	// relay: Defaults.Polling.MaxDelay must be ≥ min-delay (1s < 5s)
	// relay: Events["order-created"].MaxAttempts must be ≥ 1
	// true
}

// An event type inherits each unset field from the defaults, which inherit
// DefaultEventSettings; a set field wins, even a zero one.
func ExampleEventSettings_Inherit() {
	defaults := relay.EventSettings{
		Route:     &sender.Route{Subject: "events.{event_type}"},
		BatchSize: new(500),
	}.Inherit(relay.DefaultEventSettings())
	orders := relay.EventSettings{
		BatchSize: new(50),
		Retention: new(time.Duration(0)), // delete rows on ack
	}.Inherit(defaults)

	fmt.Println(orders.Route.Subject, *orders.BatchSize, *orders.MaxAttempts, *orders.Retention, *orders.LeaseDuration)
	// Output: events.{event_type} 50 4 0s 5m0s
}

// flakySender fails each message's first try, then acknowledges it; it
// refuses the event keyed "poison" for good.
type flakySender struct {
	mu        sync.Mutex
	tries     map[string]int
	delivered []string
}

func (f *flakySender) Send(_ context.Context, msgs []*sender.Message) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := make([]error, len(msgs))
	for i, m := range msgs {
		f.tries[m.Key]++
		switch {
		case m.Key == "poison":
			errs[i] = txbox.Permanent(errors.New("schema: missing field total"))
		case f.tries[m.Key] == 1:
			errs[i] = txbox.Rejected(errors.New("busy, try again"))
		default:
			f.delivered = append(f.delivered, fmt.Sprintf("%s on attempt %d", m.Key, m.Attempt))
		}
	}
	return sender.Summarize(errs)
}

func (*flakySender) Close(context.Context) error { return nil }

// A rejected message is retried after its backoff and counts an attempt;
// one the destination refuses for good (txbox.Permanent), or that used up
// max-attempts, moves to the dead-letter table (txbox dlq list|retry).
func Example_retriesAndDeadLetters() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "txbox-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		panic(err)
	}

	dest := &flakySender{tries: map[string]int{}}
	r, err := relay.New(relay.Config{
		Store:   db,
		Senders: map[string]sender.Sender{"main": dest},
		Defaults: relay.EventSettings{
			MaxAttempts: new(3),
			Backoff:     &relay.BackoffSettings{Delay: new(20 * time.Millisecond)},
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	pub, _ := outbox.NewPublisher(db, outbox.Config{OnPublish: func(types []string) { r.Wake(types...) }})
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Stop(ctx)
	err = inTx(ctx, db.DB(), func(tx *sql.Tx) error {
		_, err := pub.Publish(ctx, tx,
			txbox.Event{Type: "order-created", Key: "order-1", Payload: []byte(`{"id":1}`)},
			txbox.Event{Type: "order-created", Key: "poison", Payload: []byte(`{}`)})
		return err
	})
	if err != nil {
		panic(err)
	}

	var dead []*store.DeadLetter
	testenv.Within(30*time.Second, 10*time.Millisecond, func() bool {
		dead, _ = db.DeadLetterList(ctx, &store.DeadLetterListParams{Limit: 10})
		dest.mu.Lock()
		defer dest.mu.Unlock()
		return len(dead) == 1 && len(dest.delivered) == 1
	})
	fmt.Println("delivered:", dest.delivered)
	for _, d := range dead {
		fmt.Println("dead letter:", d.Key, "attempts", d.Attempts, "error:", d.LastError)
	}
	// Output:
	// delivered: [order-1 on attempt 2]
	// dead letter: poison attempts 1 error: schema: missing field total
}

// New needs only a store and at least one sender; everything else has a
// default. Start runs the pollers and background jobs; Stop lets the
// batches in flight finish. Health is the snapshot a status page or a
// readiness probe reads.
func ExampleRelay_Health() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "txbox-example")
	defer os.RemoveAll(dir)
	db, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		panic(err)
	}
	defer db.Close()
	if err := db.Migrate(ctx); err != nil {
		panic(err)
	}

	_, err = relay.New(relay.Config{Store: db})
	fmt.Println(err)

	got := make(chan *sender.Message, 1)
	r, err := relay.New(relay.Config{
		Store:      db,
		Senders:    map[string]sender.Sender{"print": printSender{got}},
		Events:     map[string]relay.EventSettings{"order-created": {}},
		InstanceID: "relay-1",
		Logger:     slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(r.Health().Running)
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	h := r.Health()
	fmt.Println(h.InstanceID, h.Running, h.Degraded)
	for _, t := range h.Types {
		fmt.Println(t.EventType, "->", t.Sender)
	}
	if err := r.Stop(ctx); err != nil {
		panic(err)
	}
	fmt.Println(r.Health().Running)
	// Output:
	// relay: Senders must name at least one sender
	// false
	// relay-1 true false
	// order-created -> print
	// false
}

// IdlePollsPerHour says what an idle event type costs under its polling
// settings: the adaptive default backs off to one poll a minute, a fixed
// 250ms poll never does.
func ExampleIdlePollsPerHour() {
	fmt.Println(relay.IdlePollsPerHour(relay.PollingSettings{}))
	fixed := relay.PollingFixed
	fmt.Println(relay.IdlePollsPerHour(relay.PollingSettings{Mode: &fixed, Delay: new(250 * time.Millisecond)}))
	// Output:
	// 72
	// 14400
}
