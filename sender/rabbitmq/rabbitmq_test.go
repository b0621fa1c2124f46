package rabbitmq_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/amqptest"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/sendertest"
)

const rabbitAddr = "127.0.0.1:5672"

// admin opens a connection of the test's own to declare, read and delete.
func admin(t *testing.T) *amqp.Channel { return amqptest.Admin(t) }

// topology declares a unique direct exchange and a queue bound to it with
// routingKey, and deletes both when the test ends.
type topology struct {
	ch       *amqp.Channel
	exchange string
	queue    string

	mu   sync.Mutex
	got  []amqp.Delivery
	more chan struct{}
}

func newTopology(t *testing.T, routingKey string, queueArgs amqp.Table) *topology {
	t.Helper()
	tp := &topology{ch: admin(t), more: make(chan struct{}, 1)}
	tp.exchange, tp.queue = amqptest.Bound(t, tp.ch, routingKey, queueArgs)
	return tp
}

// consume starts reading the queue in the background.
func (tp *topology) consume(t *testing.T) {
	t.Helper()
	ds, err := tp.ch.Consume(tp.queue, "", true, false, false, false, nil)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for d := range ds {
			tp.mu.Lock()
			tp.got = append(tp.got, d)
			tp.mu.Unlock()
			select {
			case tp.more <- struct{}{}:
			default:
			}
		}
	}()
}

func (tp *topology) received() []amqp.Delivery {
	tp.mu.Lock()
	defer tp.mu.Unlock()
	return append([]amqp.Delivery(nil), tp.got...)
}

func (tp *topology) waitFor(t *testing.T, n int) []amqp.Delivery {
	t.Helper()
	deadline := time.After(20 * time.Second)
	for {
		if got := tp.received(); len(got) >= n {
			return got
		}
		select {
		case <-tp.more:
		case <-deadline:
			t.Fatalf("received %d of %d messages", len(tp.received()), n)
		}
	}
}

func newSender(t *testing.T, cfg rabbitmq.Config) *rabbitmq.Sender {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = testenv.RabbitURL
	}
	s, err := rabbitmq.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = s.Close(ctx)
	})
	return s
}

func TestConformance(t *testing.T) {
	t.Parallel()
	sendertest.Exercise(t, sendertest.Harness{
		Features: sendertest.Features{SupportsPerMessageReject: true, SupportsKey: true, MarksDisconnected: true},
		// Dial to a closed port is refused at once; a lost connection is
		// noticed by the next publish.
		UnreachableBound: 10 * time.Second,
		NewDestination: func(t *testing.T) *sendertest.Destination {
			tp := newTopology(t, "rk", nil)
			tp.consume(t)
			return &sendertest.Destination{
				Addr: rabbitAddr,
				Connect: func(t *testing.T, addr string) (sender.Sender, sender.Route) {
					s, err := rabbitmq.New(rabbitmq.Config{URL: "amqp://guest:guest@" + addr + "/", DialTimeout: 3 * time.Second, ReconnectDelay: 200 * time.Millisecond})
					if err != nil {
						t.Fatal(err)
					}
					return s, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"}
				},
				Received: func(t *testing.T) []sendertest.Delivery {
					var out []sendertest.Delivery
					for _, d := range tp.received() {
						h := map[string]string{}
						for k, v := range d.Headers {
							if s, ok := v.(string); ok {
								h[k] = s
							}
						}
						out = append(out, sendertest.Delivery{ID: d.MessageId, Payload: d.Body, Headers: h, Key: h[sender.HeaderKey]})
					}
					return out
				},
				Poison: func(t *testing.T, m *sender.Message) {
					m.Route.RoutingKey = "bound-to-nothing"
				},
			}
		},
	})
}

func TestMessageProperties(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "order-created", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(3, sender.Route{Exchange: tp.exchange})
	for _, m := range msgs {
		m.EventType = "order-created" // the routing key defaults to it
	}
	msgs[2].Key = ""
	if err := s.Send(context.Background(), msgs); err != nil {
		t.Fatalf("Send: %v", err)
	}
	got := tp.waitFor(t, 3)
	byID := map[string]amqp.Delivery{}
	for _, d := range got {
		byID[d.MessageId] = d
	}
	for i, m := range msgs {
		d, ok := byID[m.ID.String()]
		if !ok {
			t.Fatalf("message %d (%s) not delivered", i, m.ID)
		}
		if d.DeliveryMode != amqp.Persistent {
			t.Errorf("message %d delivery mode %d, want persistent", i, d.DeliveryMode)
		}
		if d.Type != "order-created" || d.RoutingKey != "order-created" {
			t.Errorf("message %d type %q routing key %q", i, d.Type, d.RoutingKey)
		}
		if _, has := d.Headers[sender.HeaderKey]; has != (m.Key != "") {
			t.Errorf("message %d: txbox-key present = %v with key %q", i, has, m.Key)
		}
		if d.Headers[txbox.HeaderEventID] != m.ID.String() {
			t.Errorf("message %d event id header %v", i, d.Headers[txbox.HeaderEventID])
		}
	}
}

func TestUnroutableIsRejectedEvenThoughConfirmed(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(10, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
	msgs[0].Route.RoutingKey = "nobody"
	msgs[9].Route.RoutingKey = "nobody"
	errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
	for i, e := range errs {
		if i == 0 || i == 9 {
			if !errors.Is(e, rabbitmq.ErrUnroutable) || txbox.Classify(e) != txbox.ClassRejected {
				t.Errorf("message %d: %v, want rejected ErrUnroutable", i, e)
			}
		} else if e != nil {
			t.Errorf("message %d: %v", i, e)
		}
	}
	if got := tp.waitFor(t, 8); len(got) != 8 {
		t.Fatalf("delivered %d, want 8", len(got))
	}
}

// TestReturnsCorrelateUnderConcurrency: concurrent Sends share one channel
// and interleave routable and unroutable messages; every returned message
// is reported to its own Send, and no routable one is mistaken for it.
func TestReturnsCorrelateUnderConcurrency(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{Channels: 1})
	const senders, per = 8, 60
	var wg sync.WaitGroup
	routable := 0
	for g := 0; g < senders; g++ {
		msgs := sendertest.NewMessages(per, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
		for i := range msgs {
			if (i+g)%3 == 0 {
				msgs[i].Route.RoutingKey = "nobody"
			} else {
				routable++
			}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
			for i, e := range errs {
				unroutable := msgs[i].Route.RoutingKey == "nobody"
				if unroutable != errors.Is(e, rabbitmq.ErrUnroutable) || (!unroutable && e != nil) {
					t.Errorf("sender %d message %d (unroutable %v): %v", g, i, unroutable, e)
				}
			}
		}()
	}
	wg.Wait()
	if got := tp.waitFor(t, routable); len(got) != routable {
		t.Fatalf("delivered %d, want %d", len(got), routable)
	}
}

func TestMissingExchangeIsRejectedAndChannelSurvives(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(6, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
	msgs[3].Route.Exchange = testenv.UniqueName("txbox_missing_")
	errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
	for i, e := range errs {
		if i == 3 {
			if !errors.Is(e, rabbitmq.ErrNoExchange) || txbox.Classify(e) != txbox.ClassRejected {
				t.Errorf("message %d: %v, want rejected ErrNoExchange", i, e)
			}
		} else if e != nil {
			t.Errorf("message %d: %v", i, e)
		}
	}
	tp.waitFor(t, 5)
}

func TestExchangeDeletedAfterCheck(t *testing.T) {
	t.Parallel()
	good := newTopology(t, "rk", nil)
	good.consume(t)
	doomed := newTopology(t, "rk", nil)
	s := newSender(t, rabbitmq.Config{Channels: 1})
	// Both exchanges are checked and remembered.
	warm := append(sendertest.NewMessages(1, sender.Route{Exchange: good.exchange, RoutingKey: "rk"}),
		sendertest.NewMessages(1, sender.Route{Exchange: doomed.exchange, RoutingKey: "rk"})...)
	if err := s.Send(context.Background(), warm); err != nil {
		t.Fatal(err)
	}
	if err := admin(t).ExchangeDelete(doomed.exchange, false, false); err != nil {
		t.Fatal(err)
	}
	// The broker closes the channel when it sees the publish to the
	// deleted exchange: that message is rejected; neighbours in flight on
	// the channel fail as transient or were confirmed before.
	msgs := sendertest.NewMessages(4, sender.Route{Exchange: good.exchange, RoutingKey: "rk"})
	msgs[1].Route.Exchange = doomed.exchange
	errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
	if !errors.Is(errs[1], rabbitmq.ErrNoExchange) || txbox.Classify(errs[1]) != txbox.ClassRejected {
		t.Fatalf("message to deleted exchange: %v, want rejected ErrNoExchange", errs[1])
	}
	for i, e := range errs {
		if i != 1 && e != nil && txbox.Classify(e) != txbox.ClassTransient {
			t.Errorf("neighbour %d: %v, want acked or transient", i, e)
		}
	}
	// The next Send works on a fresh channel and checks the exchange again.
	again := sendertest.NewMessages(3, sender.Route{Exchange: good.exchange, RoutingKey: "rk"})
	again[2].Route.Exchange = doomed.exchange
	errs = sender.Results(s.Send(context.Background(), again), len(again))
	if errs[0] != nil || errs[1] != nil || !errors.Is(errs[2], rabbitmq.ErrNoExchange) {
		t.Fatalf("after channel loss: %v", errs)
	}
}

func TestOversizedNamesAreRejectedBeforePublish(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	s := newSender(t, rabbitmq.Config{Channels: 1})
	msgs := sendertest.NewMessages(5, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
	msgs[1].Route.RoutingKey = strings.Repeat("k", 256)
	msgs[3].Headers[strings.Repeat("h", 300)] = "v"
	errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
	for i, e := range errs {
		if i == 1 || i == 3 {
			if !errors.Is(e, rabbitmq.ErrInvalidMessage) || txbox.Classify(e) != txbox.ClassRejected {
				t.Errorf("message %d: %v, want rejected ErrInvalidMessage", i, e)
			}
		} else if e != nil {
			t.Errorf("message %d: %v", i, e)
		}
	}
	// The connection is intact: the next batch goes through.
	if err := s.Send(context.Background(), sendertest.NewMessages(2, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})); err != nil {
		t.Fatalf("Send after refused messages: %v", err)
	}
	tp.waitFor(t, 5)
}

func TestNackIsRejected(t *testing.T) {
	t.Parallel()
	// A queue that refuses publishes beyond one message makes the broker
	// nack them.
	tp := newTopology(t, "rk", amqp.Table{"x-max-length": int32(1), "x-overflow": "reject-publish"})
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(3, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
	errs := sender.Results(s.Send(context.Background(), msgs), len(msgs))
	if errs[0] != nil {
		t.Fatalf("first message: %v", errs[0])
	}
	for i := 1; i < 3; i++ {
		if !errors.Is(errs[i], rabbitmq.ErrNacked) || txbox.Classify(errs[i]) != txbox.ClassRejected {
			t.Errorf("message %d: %v, want rejected ErrNacked", i, errs[i])
		}
	}
}

func TestReconnectDelayFailsFast(t *testing.T) {
	t.Parallel()
	addr := sendertest.ClosedAddr(t)
	s := newSender(t, rabbitmq.Config{URL: "amqp://guest:secret-pw@" + addr + "/", ReconnectDelay: time.Hour})
	msgs := sendertest.NewMessages(2, sender.Route{Exchange: "x"})
	for i := 0; i < 3; i++ {
		start := time.Now()
		err := s.Send(context.Background(), msgs)
		if txbox.Classify(err) != txbox.ClassTransient || !errors.Is(err, rabbitmq.ErrConnection) {
			t.Fatalf("Send %d = %v, want transient ErrConnection", i, err)
		}
		if strings.Contains(err.Error(), "secret-pw") {
			t.Fatalf("error leaks the password: %v", err)
		}
		if d := time.Since(start); d > 2*time.Second {
			t.Fatalf("Send %d took %s", i, d)
		}
	}
}

func TestConfigValidation(t *testing.T) {
	t.Parallel()
	for name, cfg := range map[string]rabbitmq.Config{
		"no url":           {},
		"bad scheme":       {URL: "http://user:hunter2@host/"},
		"negative timeout": {URL: testenv.RabbitURL, ConfirmTimeout: -1},
		"too many chans":   {URL: testenv.RabbitURL, Channels: 5000},
	} {
		_, err := rabbitmq.New(cfg)
		if !errors.Is(err, rabbitmq.ErrInvalidConfig) {
			t.Errorf("%s: New = %v, want ErrInvalidConfig", name, err)
			continue
		}
		if strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: error leaks the password: %v", name, err)
		}
	}
}

// TestHungBroker: the broker stops answering without closing anything (a
// hung process, a network that drops packets). Send reports it as
// transient within ConfirmTimeout instead of hanging, keeps doing so while
// it lasts, and the sender recovers once bytes move again.
func TestHungBroker(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	tp.consume(t)
	f := sendertest.NewFreezer(t, rabbitAddr)
	s := newSender(t, rabbitmq.Config{URL: "amqp://guest:guest@" + f.Addr() + "/", ConfirmTimeout: time.Second,
		DialTimeout: time.Second, Heartbeat: time.Second, ReconnectDelay: 100 * time.Millisecond})
	route := sender.Route{Exchange: tp.exchange, RoutingKey: "rk"}
	if err := s.Send(context.Background(), sendertest.NewMessages(5, route)); err != nil {
		t.Fatalf("warm-up: %v", err)
	}
	sendertest.CheckHung(t, s, f, "broker", 3, 5*time.Second, func(n int) []*sender.Message { return sendertest.NewMessages(n, route) })
}

// TestWrongPasswordIsTransientAndHidden: the broker refuses the login. No
// message can get through until an operator fixes the credentials, so the
// relay must pause (transient) rather than dead-letter the backlog, and
// the password appears in no error.
func TestWrongPasswordIsTransientAndHidden(t *testing.T) {
	t.Parallel()
	testenv.RequireTCP(t, "RabbitMQ", rabbitAddr)
	const pw = "canary-Pw-7d1e"
	s := newSender(t, rabbitmq.Config{URL: "amqp://guest:" + pw + "@" + rabbitAddr + "/"})
	err := s.Send(context.Background(), sendertest.NewMessages(2, sender.Route{Exchange: "amq.topic", RoutingKey: "x"}))
	if err == nil || txbox.Classify(err) != txbox.ClassTransient || !errors.Is(err, rabbitmq.ErrConnection) {
		t.Fatalf("Send with a wrong password = %v, want transient ErrConnection", err)
	}
	if strings.Contains(err.Error(), pw) {
		t.Fatalf("error leaks the password: %v", err)
	}
	t.Logf("refused login reported as: %v", err)
}

func TestNilMessageIsPermanentNotPanic(t *testing.T) {
	t.Parallel()
	tp := newTopology(t, "rk", nil)
	s := newSender(t, rabbitmq.Config{})
	msgs := sendertest.NewMessages(2, sender.Route{Exchange: tp.exchange, RoutingKey: "rk"})
	errs := sender.Results(s.Send(context.Background(), []*sender.Message{msgs[0], nil, msgs[1]}), 3)
	if errs[0] != nil || errs[2] != nil || !errors.Is(errs[1], rabbitmq.ErrNilMessage) || txbox.Classify(errs[1]) != txbox.ClassPermanent {
		t.Fatalf("results = %v", errs)
	}
}
