package outbox_test

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// exampleStore opens a migrated PostgreSQL store on a throwaway schema.
func exampleStore(ctx context.Context) (*postgres.Driver, func(), error) {
	schema := testenv.UniqueName("example_")
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		return nil, nil, err
	}
	d, err := postgres.New(pool, postgres.Config{Schema: schema})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	cleanup := func() {
		_, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE")
		pool.Close()
	}
	if err := d.Migrate(ctx); err != nil {
		cleanup()
		return nil, nil, err
	}
	return d, cleanup, nil
}

// Publish an event in the same transaction as the business write: it is
// delivered if and only if the transaction commits.
func ExamplePublisher_Publish() {
	ctx := context.Background()
	d, cleanup, err := exampleStore(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	pub, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}

	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	// ... the business write goes through tx here ...
	ev, _ := outbox.NewJSONEvent("order-created", "order-42", map[string]any{"id": 42, "total": 1999})
	if _, err := pub.Publish(ctx, tx, ev); err != nil {
		_ = tx.Rollback(ctx)
		fmt.Println(err)
		return
	}
	if err := tx.Commit(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// What a relay would claim now:
	rows, _ := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "order-created", Limit: 10, LeaseDuration: time.Minute})
	for _, r := range rows {
		fmt.Println(r.EventType, r.Key, string(r.Payload))
	}
	// Output: order-created order-42 {"id":42,"total":1999}
}

// PublishResult runs a function in the caller's transaction and publishes
// what it returns; when the function fails nothing is published.
func ExamplePublishResult() {
	ctx := context.Background()
	d, cleanup, err := exampleStore(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cleanup()
	pub, _ := outbox.NewPublisher(d, outbox.Config{})

	type Order struct {
		ID    int `json:"id"`
		Total int `json:"total"`
	}
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer tx.Rollback(ctx)
	order, err := outbox.PublishResult(ctx, pub, tx, "order-created", "7", func(ctx context.Context) (Order, error) {
		// createOrder(ctx, tx, ...) would write the order through tx.
		return Order{ID: 7, Total: 500}, nil
	})
	fmt.Println(order, err)
	_, err = pub.Publish(ctx, nil, txbox.Event{Type: "order-created"})
	fmt.Println(err)
	// Output:
	// {7 500} <nil>
	// txbox: a transaction is required
}
