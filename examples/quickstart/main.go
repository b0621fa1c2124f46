// Command quickstart is the README's quickstart, compiled with the rest of
// the module so it cannot rot: it publishes an event inside a pgx
// transaction together with a business row, and runs a relay that delivers
// it to NATS JetStream.
//
// It needs PostgreSQL and a NATS server with JetStream, and a stream that
// captures the subject, e.g. `nats stream add EVENTS --subjects 'events.>'`.
//
//	go run ./examples/quickstart -dsn postgres://postgres@127.0.0.1:5432/test
package main

import (
	"context"
	"flag"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/store/postgres"
)

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	flag.Parse()
	ctx := context.Background()

	// Storage: your pool, txbox's tables (migrations are idempotent).
	pool, err := pgxpool.New(ctx, *dsn)
	check(err)
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Config{})
	check(err)
	check(store.Migrate(ctx))
	_, err = pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, total_cents bigint)`)
	check(err)

	// Producer: the event commits or rolls back with the order. Pgx()
	// types the publisher for pgx.Tx: passing the pool instead of the
	// transaction does not compile (outbox.NewPublisher takes any
	// transaction and checks at run time).
	pub, err := outbox.NewTxPublisher(store.Pgx(), outbox.Config{})
	check(err)
	tx, err := pool.Begin(ctx)
	check(err)
	defer tx.Rollback(ctx) // no-op after Commit
	orderID := time.Now().UnixNano()
	_, err = tx.Exec(ctx, `INSERT INTO orders (id, total_cents) VALUES ($1, $2)`, orderID, 4990)
	check(err)
	id, err := pub.PublishJSON(ctx, tx, "order-created", "customer-7", map[string]any{"order_id": orderID, "total_cents": 4990})
	check(err)
	check(tx.Commit(ctx))
	log.Printf("published event %s", id)

	// Relay: usually its own process (`txbox relay --config txbox.yaml`).
	nc, err := nats.New(nats.Config{URL: *natsURL})
	check(err)
	defer nc.Close(ctx)
	r, err := relay.New(relay.Config{
		Store:    store,
		Senders:  map[string]sender.Sender{"main": nc},
		Defaults: relay.EventSettings{Route: &sender.Route{Subject: "events.{event_type}"}},
	})
	check(err)
	check(r.Start(ctx))
	time.Sleep(2 * time.Second) // a real service runs until SIGTERM
	check(r.Stop(ctx))
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
