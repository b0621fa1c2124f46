package relay_test

import (
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store/sqlite"
)

// printSender is a destination that prints what it receives and hands
// each message to a channel.
type printSender struct{ got chan<- *sender.Message }

func (p printSender) Send(_ context.Context, msgs []*sender.Message) error {
	for _, m := range msgs {
		p.got <- m
	}
	return nil
}

func (printSender) Close(context.Context) error { return nil }

// A relay on the embedded SQLite store delivering to a custom sender. The
// event is published in the application's own transaction; the relay
// picks it up, sends it to the route expanded from the default template,
// and marks it done.
func Example() {
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

	got := make(chan *sender.Message, 1)
	r, err := relay.New(relay.Config{
		Store:   db,
		Senders: map[string]sender.Sender{"print": printSender{got}},
		Defaults: relay.EventSettings{
			Route: &sender.Route{Topic: "events.{event_type}"},
		},
		Logger: slog.New(slog.DiscardHandler),
	})
	if err != nil {
		panic(err)
	}
	pub, err := outbox.NewPublisher(db, outbox.Config{OnPublish: func(types []string) { r.Wake(types...) }})
	if err != nil {
		panic(err)
	}
	if err := r.Start(ctx); err != nil {
		panic(err)
	}
	defer r.Stop(ctx)

	// The business transaction: the event commits or rolls back with it.
	err = inTx(ctx, db.DB(), func(tx *sql.Tx) error {
		_, err := pub.Publish(ctx, tx, txbox.Event{Type: "order-created", Key: "order-42", Payload: []byte(`{"id":42}`)})
		return err
	})
	if err != nil {
		panic(err)
	}

	m := <-got
	fmt.Println(m.EventType, m.Route.Topic, m.Key, string(m.Payload), "attempt", m.Attempt)
	fmt.Println(m.Headers[txbox.HeaderEventID] == m.ID.String())
	// Output:
	// order-created events.order-created order-42 {"id":42} attempt 1
	// true
}

func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	if err := fn(tx); err != nil {
		_ = tx.Rollback()
		return err
	}
	return tx.Commit()
}
