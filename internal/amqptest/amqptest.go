// Package amqptest sets up what the tests of the RabbitMQ sender, and the
// end-to-end benchmarks through it, declare on the local broker: an admin
// channel and a unique exchange with a queue bound to it, removed when
// the test ends.
package amqptest

import (
	"net/url"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox/internal/testenv"
)

// Admin dials the local RabbitMQ (testenv.RabbitURL) on a connection of
// the test's own, closed when t ends, and returns a channel on it to
// declare, read and delete with.
func Admin(t testing.TB) *amqp.Channel {
	t.Helper()
	if u, err := url.Parse(testenv.RabbitURL); err == nil && u.Host != "" {
		testenv.RequireTCP(t, "RabbitMQ", u.Host)
	}
	conn, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		t.Fatalf("amqptest: dial RabbitMQ: %v", err)
	}
	t.Cleanup(func() { conn.Close() })
	ch, err := conn.Channel()
	if err != nil {
		t.Fatalf("amqptest: channel: %v", err)
	}
	return ch
}

// Bound declares, on ch, a unique direct exchange and a unique queue
// bound to it with routingKey (queueArgs, such as x-max-length, on the
// queue), and returns their names. Both are deleted when t ends, through
// a fresh admin channel: a test may have broken ch by then.
func Bound(t testing.TB, ch *amqp.Channel, routingKey string, queueArgs amqp.Table) (exchange, queue string) {
	t.Helper()
	exchange, queue = testenv.UniqueName("txbox_ex_"), testenv.UniqueName("txbox_q_")
	if err := ch.ExchangeDeclare(exchange, "direct", false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, queueArgs); err != nil {
		t.Fatal(err)
	}
	if err := ch.QueueBind(queue, routingKey, exchange, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		c := Admin(t)
		_, _ = c.QueueDelete(queue, false, false, false)
		_ = c.ExchangeDelete(exchange, false, false)
	})
	return exchange, queue
}
