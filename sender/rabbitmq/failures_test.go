package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/sendertest"
)

func TestDestinationIsTheExchange(t *testing.T) {
	t.Parallel()
	s := newSender(t, rabbitmq.Config{})
	for r, want := range map[sender.Route]string{
		{Exchange: "orders", RoutingKey: "order-created"}: "orders",
		{Exchange: "orders", RoutingKey: "order-paid"}:    "orders",
		{RoutingKey: "q1"}: "(default exchange) q1",
	} {
		if got := sender.DestinationOf(s, r); got != want {
			t.Errorf("destination of %+v = %q, want %q", r, got, want)
		}
	}
}

func TestDialFailureIsDisconnected(t *testing.T) {
	t.Parallel()
	s := newSender(t, rabbitmq.Config{URL: "amqp://guest:guest@" + sendertest.ClosedAddr(t) + "/", ReconnectDelay: time.Hour})
	msgs := sendertest.NewMessages(2, sender.Route{RoutingKey: "q"})
	for try := 0; try < 2; try++ { // the dial, then the remembered dial error
		for i, err := range sender.Results(s.Send(context.Background(), msgs), len(msgs)) {
			if txbox.Classify(err) != txbox.ClassTransient || !sender.IsDisconnected(err) {
				t.Fatalf("try %d, message %d: %v, want transient and Disconnected", try, i, err)
			}
		}
	}
}

// TestUnroutableIsNotDisconnected: a refusal of one message, with the
// connection fine, is no connection failure.
func TestUnroutableIsNotDisconnected(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Exchange: tp.exchange, RoutingKey: "bound-to-nothing"})
	for i, err := range sender.Results(s.Send(context.Background(), msgs), len(msgs)) {
		if !errors.Is(err, rabbitmq.ErrUnroutable) || sender.IsDisconnected(err) {
			t.Fatalf("message %d: %v, want ErrUnroutable, not Disconnected", i, err)
		}
	}
}

// TestTooLargeBeforePublish: over the sender's known limit (configured
// here), a message fails permanent with the sizes, is never published,
// and its neighbours are delivered.
func TestTooLargeBeforePublish(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{MaxMessageBytes: 1024})
	msgs := sendertest.NewMessages(3, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
	msgs[1].Payload = make([]byte, 2048)
	errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
	if errs[0] != nil || errs[2] != nil {
		t.Fatalf("neighbours of the large message: %v", errs)
	}
	if !errors.Is(errs[1], rabbitmq.ErrTooLarge) || txbox.Classify(errs[1]) != txbox.ClassPermanent || !strings.Contains(errs[1].Error(), "2048 bytes") {
		t.Fatalf("large message: %v, want permanent ErrTooLarge with its size", errs[1])
	}
	if got := tp.waitFor(t, 2); len(got) != 2 {
		t.Fatalf("received %d messages, want 2", len(got))
	}
}

// TestOverBrokerMaxMessageSize: a body over the broker's max_message_size
// (128 MiB on this RabbitMQ 3.x; the sender assumes it from the version)
// used to be published, close the channel and fail its whole batch
// transiently, again and again. Now it fails permanent alone.
func TestOverBrokerMaxMessageSize(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	big := make([]byte, 128<<20+1)
	route := sender.Route{Exchange: tp.exchange, RoutingKey: "rk"}

	t.Run("known from the version", func(t *testing.T) {
		s := newSender(t, rabbitmq.Config{})
		msgs := sendertest.NewMessages(3, route)
		msgs[1].Payload = big
		errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
		if errs[0] != nil || errs[2] != nil {
			t.Fatalf("neighbours: %v", errs)
		}
		if !errors.Is(errs[1], rabbitmq.ErrTooLarge) || txbox.Classify(errs[1]) != txbox.ClassPermanent {
			t.Fatalf("large message: %v, want permanent ErrTooLarge", errs[1])
		}
	})
	t.Run("learnt from the refusal", func(t *testing.T) {
		// The sender believes the broker takes 1 GiB; the broker's
		// refusal corrects it.
		s := newSender(t, rabbitmq.Config{MaxMessageBytes: 1 << 30})
		msgs := sendertest.NewMessages(3, route)
		msgs[1].Payload = big
		errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
		if !errors.Is(errs[1], rabbitmq.ErrTooLarge) || txbox.Classify(errs[1]) != txbox.ClassPermanent || !strings.Contains(errs[1].Error(), "134217728") {
			t.Fatalf("large message: %v, want permanent ErrTooLarge with the broker's limit", errs[1])
		}
		if errs[0] != nil {
			t.Fatalf("message published before the large one: %v", errs[0])
		}
		if errs[2] != nil && txbox.Classify(errs[2]) != txbox.ClassTransient {
			t.Fatalf("message caught in the closed channel: %v, want transient", errs[2])
		}
		msgs = sendertest.NewMessages(3, route)
		msgs[1].Payload = big
		errs = sender.Results(s.Send(context.Background(), msgs), len(msgs))
		if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], rabbitmq.ErrTooLarge) {
			t.Fatalf("second batch, with the limit learnt: %v", errs)
		}
	})
}

func TestProvisionDeclaresExchanges(t *testing.T) {
	t.Parallel()
	ch := admin(t)
	a, b := testenv.UniqueName("txbox_prov_"), testenv.UniqueName("txbox_prov_")
	t.Cleanup(func() {
		c := admin(t)
		_ = c.ExchangeDelete(a, false, false)
		_ = c.ExchangeDelete(b, false, false)
	})
	s := newSender(t, rabbitmq.Config{})
	routes := []sender.Route{{Exchange: a, RoutingKey: "x"}, {Exchange: b}, {Exchange: a}, {RoutingKey: "q"}, {Exchange: "amq.topic"}, {Exchange: "{event_type}"}}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := s.Provision(ctx, routes); err != nil {
		t.Fatalf("Provision: %v", err)
	}
	// Declared durable topic exchanges: the same declaration passes, a
	// different one is refused.
	for _, name := range []string{a, b} {
		if err := ch.ExchangeDeclare(name, "topic", true, false, false, false, nil); err != nil {
			t.Fatalf("exchange %s is not a durable topic exchange: %v", name, err)
		}
	}
	if err := s.Provision(ctx, routes); err != nil {
		t.Fatalf("second Provision: %v", err)
	}
	// A message to the new exchange is unroutable until a queue is bound:
	// a rejection, not a missing exchange.
	err := sender.Results(s.Send(ctx, sendertest.NewMessages(1, sender.Route{Exchange: a, RoutingKey: "x"})), 1)[0]
	if !errors.Is(err, rabbitmq.ErrUnroutable) {
		t.Fatalf("Send to a provisioned exchange without queues: %v, want ErrUnroutable", err)
	}
}

func TestProvisionExistingOfAnotherType(t *testing.T) {
	t.Parallel()
	ch := admin(t)
	name := testenv.UniqueName("txbox_prov_")
	if err := ch.ExchangeDeclare(name, "fanout", false, true, false, false, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin(t).ExchangeDelete(name, false, false) })
	s := newSender(t, rabbitmq.Config{})
	err := s.Provision(context.Background(), []sender.Route{{Exchange: name}})
	if err == nil || !strings.Contains(err.Error(), name) {
		t.Fatalf("Provision over a fanout exchange = %v, want an error naming it", err)
	}
	var ae *amqp.Error
	if errors.As(err, &ae) {
		t.Fatalf("the error should explain, not only wrap the AMQP error: %v", err)
	}
	if err := s.Provision(context.Background(), []sender.Route{{RoutingKey: "q"}}); err == nil {
		t.Fatal("Provision with only the default exchange succeeded without declaring anything")
	}
	if _, err := rabbitmq.New(rabbitmq.Config{URL: testenv.RabbitURL, ProvisionExchangeType: "fanciful"}); err == nil {
		t.Fatal("New with exchange type fanciful succeeded")
	}
}
