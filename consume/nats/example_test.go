package nats_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	txnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/sqlite"
)

// A JetStream consumer feeding a transactional inbox: the shipment row and
// the event id commit together, so the second delivery of the same event
// (the relay published it twice: a crash between publish and commit) is
// acknowledged without running the handler again. It runs against the
// NATS server on 127.0.0.1:4222 and an SQLite file.
func Example() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	dir, _ := os.MkdirTemp("", "consume-nats-example")
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

	nc, err := natsgo.Connect("nats://127.0.0.1:4222")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer nc.Close()
	js, _ := jetstream.New(nc)
	stream := fmt.Sprintf("EXAMPLE_%d", time.Now().UnixNano())
	subject := "example." + stream + ".order-paid"
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: stream, Subjects: []string{subject}, Storage: jetstream.MemoryStorage}); err != nil {
		fmt.Println(err)
		return
	}
	defer js.DeleteStream(context.Background(), stream)
	// What the relay publishes: the txbox headers carry the event id.
	id := txbox.NewID().String()
	for range 2 {
		m := natsgo.NewMsg(subject)
		m.Header.Set(txbox.HeaderEventID, id)
		m.Header.Set(txbox.HeaderEventType, "order-paid")
		m.Data = []byte(`{"order":"order-42"}`)
		if _, err := js.PublishMsg(ctx, m); err != nil {
			fmt.Println(err)
			return
		}
	}

	cons, err := js.CreateConsumer(ctx, stream, jetstream.ConsumerConfig{Durable: "shipping", AckPolicy: jetstream.AckExplicitPolicy})
	if err != nil {
		fmt.Println(err)
		return
	}
	c, err := txnats.New(cons, txnats.Config{
		Inbox: in,
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
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Both deliveries acknowledged: stop the consumer.
	testenv.Within(30*time.Second, 20*time.Millisecond, func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.AckFloor.Stream == 2
	})
	stop()
	fmt.Println("run:", <-done)
	var n int
	_ = st.DB().QueryRow(`SELECT count(*) FROM shipments`).Scan(&n)
	fmt.Println("shipments:", n)
	// Output:
	// shipping {"order":"order-42"}
	// run: <nil>
	// shipments: 1
}
