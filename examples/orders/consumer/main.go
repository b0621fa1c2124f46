// Command consumer is the analytics service of the orders example: it
// reads order events from NATS JetStream (or, with -broker, RabbitMQ or
// Kafka), drops duplicates through txbox's inbox in transactional mode,
// and keeps an analytics table in PostgreSQL. The inbox records the event
// id and the handler writes its effect in one transaction, so a
// redelivered event (a relay crash, a consumer crash, a broker retry) has
// no second effect. See examples/orders/README.md.
//
//	go run ./examples/orders/consumer -dsn postgres://postgres@127.0.0.1:5432/test
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	ckafka "github.com/txbox/txbox/consume/kafka"
	cnats "github.com/txbox/txbox/consume/nats"
	crabbitmq "github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/examples/orders/internal/ordertrace"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/store/postgres"
)

// order is the payload of every order event: the whole order at a version.
type order struct {
	ID         int64  `json:"id"`
	Customer   string `json:"customer"`
	TotalCents int64  `json:"total_cents"`
	Status     string `json:"status"`
	Version    int    `json:"version"`
}

type options struct {
	dsn, schema, name string
	broker            string
	natsURL, stream   string
	subjects          string
	amqpURL, queue    string
	exchange, binding string
	kafkaBrokers      string
	topics            string
	concurrency       int
}

func main() {
	var o options
	flag.StringVar(&o.dsn, "dsn", "postgres://postgres@127.0.0.1:5432/test", "PostgreSQL URL")
	flag.StringVar(&o.schema, "schema", "orders_example", "schema for the analytics and inbox tables")
	flag.StringVar(&o.name, "name", "orders-analytics", "consumer name: the inbox's, the durable's, the group's")
	flag.StringVar(&o.broker, "broker", "nats", "nats, rabbitmq or kafka")
	flag.StringVar(&o.natsURL, "nats", "nats://127.0.0.1:4222", "NATS URL")
	flag.StringVar(&o.stream, "stream", "ORDERS", "JetStream stream holding the order events (the relay provisions it)")
	flag.StringVar(&o.subjects, "subjects", "orders.>", "subjects to consume, comma-separated")
	flag.StringVar(&o.amqpURL, "amqp", "amqp://guest:guest@127.0.0.1:5672/", "RabbitMQ URL")
	flag.StringVar(&o.exchange, "exchange", "orders", "RabbitMQ exchange the relay publishes to")
	flag.StringVar(&o.queue, "queue", "orders-analytics", "RabbitMQ queue, declared and bound to -exchange")
	flag.StringVar(&o.binding, "binding", "#", "RabbitMQ binding key")
	flag.StringVar(&o.kafkaBrokers, "kafka", "127.0.0.1:9092", "Kafka seed brokers, comma-separated")
	flag.StringVar(&o.topics, "topics", "order-created,order-updated,order-cancelled", "Kafka topics, comma-separated")
	flag.IntVar(&o.concurrency, "concurrency", 4, "messages handled at once")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, log, o); err != nil {
		log.Error("consumer stopped", "err", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, log *slog.Logger, o options) error {
	cfg, err := pgxpool.ParseConfig(o.dsn)
	if err != nil {
		return fmt.Errorf("-dsn: %w", err)
	}
	cfg.ConnConfig.RuntimeParams["search_path"] = o.schema
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	st, err := postgres.New(pool, postgres.Config{Schema: o.schema})
	if err != nil {
		return err
	}
	if err := migrate(ctx, st, pool); err != nil {
		return err
	}
	tally := &tally{}
	in, err := inbox.New(st, inbox.Config{Consumer: o.name, Logger: log, Hook: tally})
	if err != nil {
		return err
	}
	// The cleaner forgets ids after the inbox TTL, on one instance at a time.
	cleaner, err := inbox.NewCleaner(st, st, inbox.CleanerConfig{TTL: in.TTL()})
	if err != nil {
		return err
	}
	if err := cleaner.Start(ctx); err != nil {
		return err
	}
	defer func() { _ = cleaner.Stop(context.Background()) }()

	tracer, flush, err := ordertrace.Start(ctx, "orders-consumer", log)
	if err != nil {
		return err
	}
	defer flush()
	handler := inbox.Typed(func(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
		// ctx continues the message's traceparent (the relay's span):
		// this span is the last hop of the order's trace.
		ctx, span := tracer.Start(ctx, "apply "+m.Type, trace.WithSpanKind(trace.SpanKindConsumer))
		defer span.End()
		err := apply(ctx, tx, m)
		if err != nil {
			span.SetStatus(codes.Error, err.Error())
		}
		return err
	})
	log.Info("consumer running", "broker", o.broker, "inbox", o.name)
	defer tally.report(log)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(5 * time.Second):
				tally.report(log)
			}
		}
	}()
	switch o.broker {
	case "nats":
		return consumeNATS(ctx, log, o, in, handler)
	case "rabbitmq":
		return consumeRabbitMQ(ctx, o, in, handler)
	case "kafka":
		return consumeKafka(ctx, o, in, handler)
	default:
		return fmt.Errorf("-broker %q: want nats, rabbitmq or kafka", o.broker)
	}
}

// migrate creates the inbox table (and the schema) and the consumer's own
// analytics table.
func migrate(ctx context.Context, st *postgres.Driver, pool *pgxpool.Pool) error {
	if err := st.Migrate(ctx); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `CREATE TABLE IF NOT EXISTS order_analytics (
		order_id bigint PRIMARY KEY,
		customer text NOT NULL,
		total_cents bigint NOT NULL,
		status text NOT NULL,
		version int NOT NULL,
		events_applied int NOT NULL)`)
	return err
}

// apply is the effect: the analytics row keeps the highest version of each
// order, whatever order the events arrive in, and counts the events it
// applied, which is what the example's test checks against the producer's
// version (one event per version: no doubles, none missing).
func apply(ctx context.Context, tx pgx.Tx, m inbox.Message) error {
	var o order
	if err := json.Unmarshal(m.Payload, &o); err != nil || o.ID == 0 {
		// No redelivery can fix a payload that does not decode: let the
		// adapter terminate it instead of retrying forever.
		return txbox.Permanent(fmt.Errorf("event %s: not an order: %v", m.ID, err))
	}
	_, err := tx.Exec(ctx, `INSERT INTO order_analytics AS a (order_id, customer, total_cents, status, version, events_applied)
		VALUES ($1, $2, $3, $4, $5, 1)
		ON CONFLICT (order_id) DO UPDATE SET
			customer = CASE WHEN EXCLUDED.version > a.version THEN EXCLUDED.customer ELSE a.customer END,
			total_cents = CASE WHEN EXCLUDED.version > a.version THEN EXCLUDED.total_cents ELSE a.total_cents END,
			status = CASE WHEN EXCLUDED.version > a.version THEN EXCLUDED.status ELSE a.status END,
			version = GREATEST(a.version, EXCLUDED.version),
			events_applied = a.events_applied + 1`,
		o.ID, o.Customer, o.TotalCents, o.Status, o.Version)
	return err
}

// tally counts what the inbox settled, for the log: duplicates dropped are
// the redeliveries that had no second effect.
type tally struct {
	inbox.NopHook
	processed, duplicates, failed atomic.Int64
}

func (t *tally) OnHandled(ev inbox.HandledEvent) {
	switch ev.Result {
	case inbox.Processed:
		t.processed.Add(1)
	case inbox.Duplicate:
		t.duplicates.Add(1)
	default:
		t.failed.Add(1)
	}
}

func (t *tally) report(log *slog.Logger) {
	log.Info("inbox tally", "processed", t.processed.Load(), "duplicates_dropped", t.duplicates.Load(), "failed", t.failed.Load())
}

func consumeNATS(ctx context.Context, log *slog.Logger, o options, in *inbox.Inbox, h inbox.Handler) error {
	nc, err := natsgo.Connect(o.natsURL, natsgo.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	// The relay creates the stream at its start (`provision: true`);
	// wait for it rather than racing it.
	var stream jetstream.Stream
	for {
		stream, err = js.Stream(ctx, o.stream)
		if err == nil {
			break
		}
		if !errors.Is(err, jetstream.ErrStreamNotFound) {
			return err
		}
		log.Info("waiting for the stream", "stream", o.stream)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(time.Second):
		}
	}
	cc := jetstream.ConsumerConfig{
		Durable:    o.name,
		AckPolicy:  jetstream.AckExplicitPolicy,
		AckWait:    30 * time.Second,
		MaxDeliver: -1,
	}
	// One subject goes in FilterSubject, which every JetStream server
	// takes; several need a server of 2.10 or later.
	if subjects := strings.Split(o.subjects, ","); len(subjects) == 1 {
		cc.FilterSubject = subjects[0]
	} else {
		cc.FilterSubjects = subjects
	}
	cons, err := stream.CreateOrUpdateConsumer(ctx, cc)
	if err != nil {
		return err
	}
	c, err := cnats.New(cons, cnats.Config{Inbox: in, Handler: h, Concurrency: o.concurrency, Logger: log})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func consumeRabbitMQ(ctx context.Context, o options, in *inbox.Inbox, h inbox.Handler) error {
	conn, err := amqp.Dial(o.amqpURL)
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	if err := ch.ExchangeDeclare(o.exchange, "topic", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(o.queue, true, false, false, false, nil); err != nil {
		return err
	}
	if err := ch.QueueBind(o.queue, o.binding, o.exchange, false, nil); err != nil {
		return err
	}
	c, err := crabbitmq.New(ch, crabbitmq.Config{Inbox: in, Handler: h, Queue: o.queue, Concurrency: o.concurrency})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

func consumeKafka(ctx context.Context, o options, in *inbox.Inbox, h inbox.Handler) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(o.kafkaBrokers, ",")...),
		kgo.ConsumerGroup(o.name),
		kgo.ConsumeTopics(strings.Split(o.topics, ",")...),
		kgo.DisableAutoCommit(),
	)
	if err != nil {
		return err
	}
	defer cl.Close()
	c, err := ckafka.New(cl, ckafka.Config{Inbox: in, Handler: h})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}
