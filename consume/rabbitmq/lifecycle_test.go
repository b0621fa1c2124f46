package rabbitmq_test

import (
	"testing"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume/rabbitmq"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
)

// TestLifecycle: Start, Stop, Started and Stopped on RabbitMQ, as the
// relay has them; a closed channel stops the consumer by itself with
// ErrDeliveriesClosed.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	consumetest.RunLifecycle(t, func(t *testing.T, in *inbox.Inbox, h inbox.Handler) consumetest.Subject {
		conn := dial(t)
		q := queue(t, conn)
		pub := channel(t, conn)
		ch := channel(t, conn)
		cons, err := rabbitmq.New(ch, rabbitmq.Config{Inbox: in, Handler: h, Queue: q})
		if err != nil {
			t.Fatal(err)
		}
		return consumetest.Subject{
			Consumer: cons,
			Publish:  func(id txbox.ID) { publish(t, pub, q, id, true) },
			Break:    func() { _ = ch.Close() },
			Fatal:    rabbitmq.ErrDeliveriesClosed,
		}
	})
}

// TestStartChecksTheQueue: Start subscribes before it returns, so a
// queue that does not exist is Start's error, and the consumer did not
// start.
func TestStartChecksTheQueue(t *testing.T) {
	t.Parallel()
	conn := dial(t)
	env := consumetest.New(t, "rabbit-noqueue")
	cons, err := rabbitmq.New(channel(t, conn), rabbitmq.Config{Inbox: env.Inbox, Handler: env.Handler, Queue: "txbox_no_such_queue"})
	if err != nil {
		t.Fatal(err)
	}
	if err := cons.Start(t.Context()); err == nil {
		t.Fatal("Start on a missing queue succeeded")
	}
	select {
	case <-cons.Started():
		t.Error("Started closed after a failed Start")
	default:
	}
}
