// Command quickstart is the README's quickstart, compiled with the rest of
// the module so it cannot rot: it publishes an event inside a pgx
// transaction together with a business row, and runs a relay that delivers
// it to NATS JetStream. It waits for the delivery and exits 0 once
// JetStream stored the event, or exits 1 with the reason (the destination
// rejected it, or nothing answered within -timeout).
//
// It needs PostgreSQL and a NATS server with JetStream, and the stream the
// README names, binding the subject the event goes to:
//
//	nats stream add TXBOX --subjects 'events.>' --defaults
//	go run ./examples/quickstart -dsn postgres://postgres@127.0.0.1:5432/test
//
// Without the stream JetStream refuses the event, and quickstart exits 1
// with "nats: no stream bound to the subject". (`txbox relay` with
// `provision: true` creates that stream itself.)
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/store/postgres"
)

func main() {
	dsn := flag.String("dsn", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	natsURL := flag.String("nats", "nats://127.0.0.1:4222", "NATS URL")
	subject := flag.String("subject", "events.{event_type}", "the route's subject template")
	timeout := flag.Duration("timeout", 30*time.Second, "how long to wait for the delivery")
	flag.Parse()
	if err := run(*dsn, *natsURL, *subject, *timeout); err != nil {
		log.Fatal(err)
	}
}

func run(dsn, natsURL, subject string, timeout time.Duration) error {
	ctx := context.Background()

	// Storage: your pool, txbox's tables (migrations are idempotent).
	// The relay runs in this process and claims with lock (a NATS sender
	// on PostgreSQL): each batch in flight holds a connection until
	// JetStream acknowledges it, and relay.LockReserve more serve
	// everything else. pgxpool's default (4 on a small machine) would
	// make the claims queue, and the relay warn; size the pool for them
	// (docs/operations.md, "Connection pool").
	pcfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	pcfg.MaxConns = max(pcfg.MaxConns, int32(relay.DefaultInFlight+relay.LockReserve))
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	store, err := postgres.New(pool, postgres.Config{})
	if err != nil {
		return err
	}
	if err := store.Migrate(ctx); err != nil {
		return err
	}
	if _, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS orders (id bigint PRIMARY KEY, total_cents bigint)`); err != nil {
		return err
	}

	// Producer: the event commits or rolls back with the order.
	if err := publishOrder(ctx, pool, store); err != nil {
		return err
	}

	// Relay: usually its own process (`txbox relay --config txbox.yaml`),
	// running until SIGTERM. Here it runs until the first outcome of the
	// event's type, which a Hook reports (the metrics/ collectors use the
	// same interface).
	nc, err := nats.New(nats.Config{URL: natsURL})
	if err != nil {
		return err
	}
	defer nc.Close(ctx)
	outcome := &firstOutcome{eventType: "order-created", done: make(chan txbox.BatchEvent, 1)}
	r, err := relay.New(relay.Config{
		Store:    store,
		Senders:  map[string]sender.Sender{"main": nc},
		Defaults: relay.EventSettings{Route: &sender.Route{Subject: subject}},
		Hooks:    []txbox.RelayHook{outcome},
	})
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return err
	}
	var result error
	select {
	case e := <-outcome.done:
		if e.Sent > 0 {
			log.Printf("delivered: JetStream stored the event (subject %s)", subject)
			break
		}
		// The relay recorded the destination's answer on the row.
		result = fmt.Errorf("not delivered: %s", lastError(ctx, store, e.EventType))
	case <-time.After(timeout):
		result = fmt.Errorf("not delivered within %v: %v", timeout, outcome.circuitError())
	}
	return errors.Join(result, r.Stop(ctx))
}

// publishOrder writes an order and its event in one transaction.
func publishOrder(ctx context.Context, pool *pgxpool.Pool, store *postgres.Driver) error {
	// Pgx() types the publisher for pgx.Tx: passing the pool instead of
	// the transaction does not compile (outbox.NewPublisher takes any
	// transaction and checks at run time).
	pub, err := outbox.NewTxPublisher(store.Pgx(), outbox.Config{})
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx) // no-op after Commit
	orderID := time.Now().UnixNano()
	if _, err := tx.Exec(ctx, `INSERT INTO orders (id, total_cents) VALUES ($1, $2)`, orderID, 4990); err != nil {
		return err
	}
	id, err := pub.PublishJSON(ctx, tx, "order-created", "customer-7", map[string]any{"order_id": orderID, "total_cents": 4990})
	if err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return err
	}
	log.Printf("published event %s", id)
	return nil
}

// lastError returns the error the relay recorded for eventType's rows.
func lastError(ctx context.Context, store *postgres.Driver, eventType string) string {
	types, err := store.OutboxInspect(ctx)
	if err != nil {
		return "the destination refused it; reading why: " + err.Error()
	}
	for _, t := range types {
		if t.EventType == eventType && t.LastError != "" {
			return t.LastError
		}
	}
	return "the destination refused it"
}
