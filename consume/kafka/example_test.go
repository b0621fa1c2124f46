package kafka_test

import (
	"context"
	"log"
	"log/slog"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/postgres"
)

// Wiring a Kafka consumer group to a transactional inbox on PostgreSQL.
// Offsets are committed only after the shipment row and the event id
// committed together.
func Example() {
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, "postgres://app@db/app")
	if err != nil {
		log.Fatal(err)
	}
	st, err := postgres.New(pool, postgres.Config{})
	if err != nil {
		log.Fatal(err)
	}
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping", Logger: slog.Default()})
	if err != nil {
		log.Fatal(err)
	}
	cl, err := kgo.NewClient(
		kgo.SeedBrokers("kafka:9092"),
		kgo.ConsumerGroup("shipping"),
		kgo.ConsumeTopics("order-paid"),
		kgo.DisableAutoCommit(), // commit after the handler, not after the poll
	)
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Close()
	c, err := kafka.New(cl, kafka.Config{
		Inbox: in,
		Handler: inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
			_, err := tx.Exec(ctx, `INSERT INTO shipments (order_id) VALUES ($1)`, m.Key)
			return err
		}),
		Logger: slog.Default(),
	})
	if err != nil {
		log.Fatal(err)
	}
	_ = c.Run(ctx) // until ctx ends
}
