package rabbitmq_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	txrabbit "github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/sqlite"
)

// A RabbitMQ queue feeding a transactional inbox: the shipment row and the
// event id commit together, so the second delivery of the same event is
// acked without running the handler again. It runs against the RabbitMQ
// server on 127.0.0.1:5672 and an SQLite file.
func Example() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "consume-rabbitmq-example")
	defer os.RemoveAll(dir)
	st, err := sqlite.Open(filepath.Join(dir, "shipping.db"), sqlite.Config{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer st.Close()
	_ = st.Migrate(ctx)
	_, _ = st.DB().Exec(`CREATE TABLE shipments (order_id TEXT)`)
	in, err := inbox.New(st, inbox.Config{Consumer: "shipping"})
	if err != nil {
		fmt.Println(err)
		return
	}

	conn, err := amqp.Dial("amqp://guest:guest@127.0.0.1:5672/")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		fmt.Println(err)
		return
	}
	q, err := ch.QueueDeclare(fmt.Sprintf("example-shipping-%d", time.Now().UnixNano()), false, true, false, false, nil)
	if err != nil {
		fmt.Println(err)
		return
	}
	// What the relay publishes: the txbox headers carry the event id.
	id := txbox.NewID().String()
	for range 2 {
		err := ch.PublishWithContext(ctx, "", q.Name, false, false, amqp.Publishing{
			Headers: amqp.Table{txbox.HeaderEventID: id, txbox.HeaderEventType: "order-paid"},
			Body:    []byte(`{"order":"order-42"}`),
		})
		if err != nil {
			fmt.Println(err)
			return
		}
	}

	c, err := txrabbit.New(ch, txrabbit.Config{
		Inbox: in,
		Queue: q.Name,
		Handler: inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			fmt.Println("shipping", string(m.Payload))
			_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES ('order-42')`)
			return err
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Start subscribes, then consumes in the background (Run(ctx) is
	// Start, then Stop when ctx ends).
	if err := c.Start(ctx); err != nil {
		fmt.Println(err)
		return
	}

	// Both deliveries acked: stop the consumer, giving a handler still
	// in flight up to 10 s to finish.
	testenv.Within(30*time.Second, 20*time.Millisecond, func() bool { return c.Stats().Acked >= 2 })
	stopCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	fmt.Println("stop:", c.Stop(stopCtx), "acked:", c.Stats().Acked)
	var n int
	_ = st.DB().QueryRow(`SELECT count(*) FROM shipments`).Scan(&n)
	fmt.Println("shipments:", n)
	// Output:
	// shipping {"order":"order-42"}
	// stop: <nil> acked: 2
	// shipments: 1
}
