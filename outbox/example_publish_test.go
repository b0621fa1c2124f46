package outbox_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store/sqlite"
)

// sqliteStore opens a migrated SQLite store in a temporary directory; the
// returned function closes it and removes the directory.
func sqliteStore() (*sqlite.Driver, func()) {
	dir, err := os.MkdirTemp("", "outbox-example")
	if err != nil {
		panic(err)
	}
	d, err := sqlite.Open(filepath.Join(dir, "app.db"), sqlite.Config{})
	if err != nil {
		panic(err)
	}
	if err := d.Migrate(context.Background()); err != nil {
		panic(err)
	}
	return d, func() { _ = d.Close(); _ = os.RemoveAll(dir) }
}

// pending lists the outbox rows a relay would deliver, oldest first.
func pending(d *sqlite.Driver) []string {
	rows, err := d.DB().Query(`SELECT event_type, coalesce(event_key, ''), payload FROM txbox_outbox ORDER BY id`)
	if err != nil {
		panic(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var typ, key, payload string
		if err := rows.Scan(&typ, &key, &payload); err != nil {
			panic(err)
		}
		out = append(out, typ+" "+key+" "+payload)
	}
	return out
}

// NewPublisher takes the store the application already uses; the zero
// Config is ready to use. The publisher checks every event before writing
// anything: an oversized payload or a call without a transaction is an
// error and nothing reaches the table.
func ExampleNewPublisher() {
	d, cleanup := sqliteStore()
	defer cleanup()
	ctx := context.Background()

	pub, err := outbox.NewPublisher(d, outbox.Config{
		MaxPayloadSize: 1024,
		// Called before the commit: a hint, e.g. relay.Relay.Wake.
		OnPublish: func(types []string) { fmt.Println("published", types) },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	tx, _ := d.DB().BeginTx(ctx, nil)
	defer tx.Rollback()
	_, err = pub.Publish(ctx, tx, txbox.Event{Type: "order-created", Payload: make([]byte, 2048)})
	var tooLarge *txbox.PayloadTooLargeError
	fmt.Println(errors.As(err, &tooLarge))
	_, err = pub.Publish(ctx, d.DB(), txbox.Event{Type: "order-created"})
	fmt.Println(errors.Is(err, txbox.ErrNoTransaction))
	_, err = pub.Publish(ctx, tx, txbox.Event{Type: "order-created", Key: "order-1", Payload: []byte(`{"id":1}`)})
	fmt.Println(err)
	// Output:
	// true
	// true
	// published [order-created]
	// <nil>
}

// Several events in one call are written in one round trip, and commit or
// roll back together with the transaction: here the first transaction
// rolls back and leaves nothing, the second commits both of its events.
func ExamplePublisher_Publish_batch() {
	d, cleanup := sqliteStore()
	defer cleanup()
	ctx := context.Background()
	pub, _ := outbox.NewPublisher(d, outbox.Config{})

	events := []txbox.Event{
		{Type: "order-created", Key: "order-1", Payload: []byte(`{"id":1}`)},
		{Type: "invoice-issued", Key: "order-1", Payload: []byte(`{"invoice":"I-1"}`)},
	}
	tx, _ := d.DB().BeginTx(ctx, nil)
	ids, err := pub.Publish(ctx, tx, events...)
	fmt.Println(len(ids), err)
	_ = tx.Rollback() // the business write failed: the events go with it
	fmt.Println("after rollback:", pending(d))

	tx, _ = d.DB().BeginTx(ctx, nil)
	if _, err := pub.Publish(ctx, tx, events...); err != nil {
		fmt.Println(err)
		return
	}
	_ = tx.Commit()
	for _, row := range pending(d) {
		fmt.Println(row)
	}
	// Output:
	// 2 <nil>
	// after rollback: []
	// order-created order-1 {"id":1}
	// invoice-issued order-1 {"invoice":"I-1"}
}

// PublishJSON marshals a value and publishes it as one event.
func ExamplePublisher_PublishJSON() {
	d, cleanup := sqliteStore()
	defer cleanup()
	ctx := context.Background()
	pub, _ := outbox.NewPublisher(d, outbox.Config{})

	type OrderCreated struct {
		ID    int `json:"id"`
		Total int `json:"total_cents"`
	}
	err := inTx(ctx, d.DB(), func(tx *sql.Tx) error {
		// ... INSERT INTO orders ... through tx ...
		_, err := pub.PublishJSON(ctx, tx, "order-created", "customer-7", OrderCreated{ID: 42, Total: 4990})
		return err
	})
	fmt.Println(err, pending(d))
	// Output: <nil> [order-created customer-7 {"id":42,"total_cents":4990}]
}

// NewJSONEvent builds the event without publishing it, to add headers or
// publish it together with others.
func ExampleNewJSONEvent() {
	ev, err := outbox.NewJSONEvent("order-created", "order-42", map[string]int{"id": 42})
	fmt.Println(ev.Type, ev.Key, string(ev.Payload), ev.Headers["content-type"], err)
	// Output: order-created order-42 {"id":42} application/json <nil>
}

// When the function fails, PublishResult publishes nothing and returns its
// error; the caller rolls back.
func ExamplePublishResult_error() {
	d, cleanup := sqliteStore()
	defer cleanup()
	ctx := context.Background()
	pub, _ := outbox.NewPublisher(d, outbox.Config{})

	tx, _ := d.DB().BeginTx(ctx, nil)
	_, err := outbox.PublishResult(ctx, pub, tx, "order-created", "order-7", func(ctx context.Context) (int, error) {
		return 0, errors.New("out of stock")
	})
	fmt.Println(err)
	_ = tx.Rollback()
	fmt.Println(pending(d))
	// Output:
	// out of stock
	// []
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
