package kafka_test

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/kafka"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/store/sqlite"
)

// A consumer group member feeding a transactional inbox on SQLite, against
// an in-process Kafka cluster (kfake). The record is on the topic twice,
// as after a relay that crashed between the produce and its commit: the
// second copy is acknowledged without running the handler, and the
// offsets of both are committed.
func ExampleNew() {
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "order-paid"))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cluster.Close()

	dir, _ := os.MkdirTemp("", "consume-kafka-example")
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

	// What the relay produces: the txbox headers carry the event id.
	id := txbox.NewID().String()
	rec := func() *kgo.Record {
		return &kgo.Record{Topic: "order-paid", Key: []byte("order-42"), Value: []byte(`{"order":42}`), Headers: []kgo.RecordHeader{
			{Key: txbox.HeaderEventID, Value: []byte(id)},
			{Key: txbox.HeaderEventType, Value: []byte("order-paid")},
		}}
	}
	producer, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer producer.Close()
	if err := producer.ProduceSync(ctx, rec(), rec()).FirstErr(); err != nil {
		fmt.Println(err)
		return
	}

	cl, err := kgo.NewClient(
		kgo.SeedBrokers(cluster.ListenAddrs()...),
		kgo.ConsumerGroup("shipping"),
		kgo.ConsumeTopics("order-paid"),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.DisableAutoCommit(), // the adapter commits after the handler
	)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer cl.Close()
	c, err := kafka.New(cl, kafka.Config{
		Inbox: in,
		Handler: inbox.Typed(func(ctx context.Context, tx *sql.Tx, m inbox.Message) error {
			fmt.Println("shipping", m.Key, string(m.Payload))
			_, err := tx.ExecContext(ctx, `INSERT INTO shipments (order_id) VALUES (?)`, m.Key)
			return err
		}),
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()

	// Both records committed: stop the consumer.
	testenv.Within(30*time.Second, 10*time.Millisecond, func() bool {
		return cl.CommittedOffsets()["order-paid"][0].Offset == 2
	})
	stop()
	fmt.Println("run:", <-done)
	var n int
	_ = st.DB().QueryRow(`SELECT count(*) FROM shipments`).Scan(&n)
	fmt.Println("shipments:", n)
	// Output:
	// shipping order-42 {"order":42}
	// run: <nil>
	// shipments: 1
}
