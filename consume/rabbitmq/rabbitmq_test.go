package rabbitmq_test

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

func dial(t *testing.T) *amqp.Connection {
	t.Helper()
	testenv.RequireTCP(t, "RabbitMQ", "127.0.0.1:5672")
	conn, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		t.Fatalf("dial rabbitmq: %v", err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

func channel(t *testing.T, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// A channel whose consumer stopped with deliveries still in
		// flight (a test failed mid-run) can wait for ever on the
		// server's close-ok: amqp091 hands deliveries on unbuffered
		// channels. Close the connection under a deadline then, so a
		// failure reports instead of hanging the package for its
		// timeout.
		closed := make(chan struct{})
		go func() {
			_ = ch.Close()
			close(closed)
		}()
		select {
		case <-closed:
		case <-time.After(10 * time.Second):
			t.Logf("the channel did not close within 10s; closing its connection")
			_ = conn.CloseDeadline(time.Now().Add(5 * time.Second))
		}
	})
	return ch
}

// queue declares a unique queue, deleted when the test ends.
func queue(t *testing.T, conn *amqp.Connection) string {
	t.Helper()
	name := testenv.UniqueName("txbox_inbox_")
	ch := channel(t, conn)
	if _, err := ch.QueueDeclare(name, true, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c, err := conn.Channel()
		if err == nil {
			_, _ = c.QueueDelete(name, false, false, false)
			_ = c.Close()
		}
	})
	return name
}

func publish(t *testing.T, ch *amqp.Channel, q string, id txbox.ID, viaHeader bool) {
	t.Helper()
	p := amqp.Publishing{Body: []byte(`{"n":1}`), DeliveryMode: amqp.Persistent, Headers: amqp.Table{txbox.HeaderEventType: "order-created"}}
	if viaHeader {
		p.Headers[txbox.HeaderEventID] = id.String()
	} else {
		p.MessageId = id.String()
	}
	if err := ch.PublishWithContext(context.Background(), "", q, false, false, p); err != nil {
		t.Fatal(err)
	}
}

// TestAckAfterHandler: duplicates have no second effect, a failing handler
// is nacked and redelivered until it succeeds, a delivery without an id is
// rejected, a poison event (txbox.Permanent) is rejected after one try,
// and the queue ends empty (everything acked or rejected).
func TestAckAfterHandler(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	q := queue(t, conn)
	pub := channel(t, conn)
	env := consumetest.New(t, "rabbit-test")
	const n = 200
	ids := make([]txbox.ID, n)
	for i := range ids {
		ids[i] = txbox.NewID()
		publish(t, pub, q, ids[i], i%2 == 0)
	}
	for i := 0; i < n; i += 10 {
		publish(t, pub, q, ids[i], true) // redelivered by hand
	}
	if err := pub.PublishWithContext(context.Background(), "", q, false, false, amqp.Publishing{Body: []byte("no id")}); err != nil {
		t.Fatal(err)
	}
	env.FailFirst(ids[3], 2)
	poison := txbox.NewID()
	env.Poison(poison)
	publish(t, pub, q, poison, true)

	cch := channel(t, conn)
	cons, err := rabbitmq.New(cch, rabbitmq.Config{Inbox: env.Inbox, Handler: env.Handler, Queue: q,
		Backoff: consume.Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	_, cancel, done := consumetest.Run(cons.Run)
	env.WaitEffects(t, ids, 60*time.Second)
	// Every delivery is settled: the queue drains to zero ready and zero
	// unacked messages.
	ready, settled := -1, false
	defer func() {
		// Runs also when WaitFor fails the test.
		if !settled {
			t.Errorf("queue still has %d ready messages; stats %+v", ready, cons.Stats())
		}
	}()
	testenv.WaitForEvery(t, 30*time.Second, 10*time.Millisecond, "an empty queue and every message acked, rejected or nacked as planned", func() bool {
		st, err := pub.QueueDeclarePassive(q, true, false, false, false, nil)
		if err != nil {
			t.Fatal(err)
		}
		ready = st.Messages
		s := cons.Stats()
		return st.Messages == 0 && s.Acked == n+n/10 && s.Rejected == 2 && s.Nacked == 2
	})
	settled = true
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
	// Unacked deliveries would come back to the queue when the channel
	// closes; none must.
	_ = cch.Close()
	st, err := pub.QueueDeclarePassive(q, true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.Messages != 0 {
		t.Errorf("after closing the consumer channel the queue has %d messages: some were not acked", st.Messages)
	}
	env.CheckExactlyOnce(t, ids)
	if got := env.Calls(); got != n+3 {
		t.Errorf("handler calls = %d, want %d (the poison event once)", got, n+3)
	}
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	ch := channel(t, conn)
	env := consumetest.New(t, "rabbit-cfg")
	for _, cfg := range []rabbitmq.Config{
		{Handler: env.Handler, Queue: "q"},
		{Inbox: env.Inbox, Tenants: &inbox.Tenants{}, Handler: env.Handler, Queue: "q"},
		{Inbox: env.Inbox, Queue: "q"},
		{Inbox: env.Inbox, Handler: env.Handler},
		{Inbox: env.Inbox, Handler: env.Handler, Queue: "q", Prefetch: -1},
		{Inbox: env.Inbox, Handler: env.Handler, Queue: "q", Backoff: consume.Backoff{Min: time.Second, Max: time.Millisecond}},
		{Inbox: env.Inbox, Handler: env.Handler, Queue: "q", Concurrency: -1},
		{Inbox: env.Inbox, Handler: env.Handler, Queue: "q", DrainTimeout: -time.Second},
	} {
		var ce *consume.ConfigError
		if _, err := rabbitmq.New(ch, cfg); !errors.As(err, &ce) {
			t.Errorf("New(%+v) = %v; want *consume.ConfigError", cfg, err)
		}
	}
}

// orderQueue declares a fresh queue and a fresh direct exchange that routes
// order-created to it, for the relay to publish on.
func orderQueue(t *testing.T, conn *amqp.Connection) (q, exchange string) {
	t.Helper()
	q = queue(t, conn)
	ch := channel(t, conn)
	exchange = testenv.UniqueName("txbox_inbox_x_")
	if err := ch.ExchangeDeclare(exchange, "direct", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(q, "order-created", exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	return q, exchange
}
