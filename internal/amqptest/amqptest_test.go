package amqptest_test

import (
	"context"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox/internal/amqptest"
	"github.com/txbox/txbox/internal/testenv"
)

// TestBoundRoutes: a message published to the exchange with the routing
// key lands in the queue, and one with another key does not.
func TestBoundRoutes(t *testing.T) {
	t.Parallel()
	ch := amqptest.Admin(t)
	ex, q := amqptest.Bound(t, ch, "rk", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, key := range []string{"other", "rk"} {
		if err := ch.PublishWithContext(ctx, ex, key, false, false, amqp.Publishing{Body: []byte(key)}); err != nil {
			t.Fatal(err)
		}
	}
	var got []string
	testenv.WaitFor(t, 10*time.Second, "the routed message in the queue", func() bool {
		d, ok, err := ch.Get(q, true)
		if err != nil {
			t.Fatal(err)
		}
		if ok {
			got = append(got, string(d.Body))
		}
		return ok
	})
	if len(got) != 1 || got[0] != "rk" {
		t.Fatalf("queue got %q, want only the message routed with rk", got)
	}
	if _, ok, err := ch.Get(q, true); ok || err != nil {
		t.Fatalf("a second message in the queue (%v, %v): the other key was routed too", ok, err)
	}
}
