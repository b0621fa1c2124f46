package rabbitmq_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/rabbitmq"
	"github.com/txbox/txbox/sender/sendertest"
)

// BenchmarkDrainShape publishes the way `txbox bench --scenario drain`
// does, without the database: 4 concurrent workers (the relay's default
// in-flight batches, the naive loop's workers) each publishing batches of
// 200 to the default exchange straight to a durable queue and waiting for
// the confirms. It compares, in the same iterations (order rotated):
//
//   - naive: the bench's naive loop, a channel per worker, not mandatory,
//     no headers, no return listener;
//   - raw-full: a channel per worker doing what the sender must (mandatory,
//     the event headers and properties), without the sender's bookkeeping:
//     what the guarantees cost at the broker and in the client;
//   - sender-chN: the txbox sender with N channels.
//
// Each variant reports msgs/s and its time relative to naive (x/naive,
// above 1 is slower).
func BenchmarkDrainShape(b *testing.B) {
	const (
		workers = 4
		batch   = 200
		batches = 24 // per variant and iteration, spread over the workers
	)
	conn, err := amqp.Dial(testenv.RabbitURL)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	admin, err := conn.Channel()
	if err != nil {
		b.Fatal(err)
	}
	q := testenv.UniqueName("bench_drain_")
	if _, err := admin.QueueDeclare(q, true, false, false, false, nil); err != nil {
		b.Fatal(err)
	}
	defer func() { _, _ = admin.QueueDelete(q, false, false, false) }()
	route := sender.Route{RoutingKey: q}
	msgs := make([][]*sender.Message, batches)
	for i := range msgs {
		msgs[i] = sendertest.NewMessages(batch, route)
	}

	rawChans := func() []*amqp.Channel {
		chs := make([]*amqp.Channel, workers)
		for i := range chs {
			ch, err := conn.Channel()
			if err != nil {
				b.Fatal(err)
			}
			if err := ch.Confirm(false); err != nil {
				b.Fatal(err)
			}
			chs[i] = ch
		}
		return chs
	}
	naiveChans, fullChans, mandChans, hdrChans := rawChans(), rawChans(), rawChans(), rawChans()
	for _, ch := range append(append(fullChans, mandChans...), hdrChans...) {
		// The returns must be read or the client blocks.
		rs := ch.NotifyReturn(make(chan amqp.Return, 16))
		go func() {
			for range rs {
			}
		}()
	}
	raw := func(chs []*amqp.Channel, mandatory, full bool) func(w int, ms []*sender.Message) {
		return func(w int, ms []*sender.Message) {
			ch := chs[w]
			dcs := make([]*amqp.DeferredConfirmation, len(ms))
			for i, m := range ms {
				p := amqp.Publishing{MessageId: m.ID.String(), Body: m.Payload, DeliveryMode: amqp.Persistent, ContentType: "application/json"}
				if full {
					h := make(amqp.Table, len(m.Headers)+1)
					for k, v := range m.Headers {
						h[k] = v
					}
					h[sender.HeaderKey] = m.Key
					p = amqp.Publishing{Headers: h, DeliveryMode: amqp.Persistent, MessageId: m.ID.String(),
						Type: m.EventType, Timestamp: m.CreatedAt, AppId: "txbox", Body: m.Payload}
				}
				dc, err := ch.PublishWithDeferredConfirmWithContext(context.Background(), "", q, mandatory, false, p)
				if err != nil {
					b.Fatal(err)
				}
				dcs[i] = dc
			}
			for _, dc := range dcs {
				if !dc.Wait() {
					b.Fatal("nack")
				}
			}
		}
	}
	viaSender := func(channels int) func(int, []*sender.Message) {
		s, err := rabbitmq.New(rabbitmq.Config{URL: testenv.RabbitURL, Channels: channels})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = s.Close(context.Background()) })
		return func(_ int, ms []*sender.Message) {
			if err := s.Send(context.Background(), ms); err != nil {
				b.Fatal(err)
			}
		}
	}
	type variant struct {
		name string
		run  func(int, []*sender.Message)
		t    time.Duration
	}
	vs := []*variant{
		{name: "naive", run: raw(naiveChans, false, false)},
		{name: "raw-full", run: raw(fullChans, true, true)},
		{name: "raw-mandatory", run: raw(mandChans, true, false)},
		{name: "raw-headers", run: raw(hdrChans, false, true)},
	}
	for _, n := range []int{1, 2, 4} {
		vs = append(vs, &variant{name: fmt.Sprintf("sender-ch%d", n), run: viaSender(n)})
	}
	drain := func(v *variant) time.Duration {
		next := make(chan []*sender.Message, batches)
		for _, ms := range msgs {
			next <- ms
		}
		close(next)
		start := time.Now()
		var wg sync.WaitGroup
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ms := range next {
					v.run(w, ms)
				}
			}()
		}
		wg.Wait()
		d := time.Since(start)
		if _, err := admin.QueuePurge(q, false); err != nil {
			b.Fatal(err)
		}
		return d
	}
	for _, v := range vs {
		drain(v) // warm up: connections, channels
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range vs {
			v := vs[(i+j)%len(vs)]
			v.t += drain(v)
		}
	}
	b.StopTimer()
	n := float64(b.N * batches * batch)
	for _, v := range vs {
		b.ReportMetric(n/v.t.Seconds(), v.name+"-msgs/s")
		if v != vs[0] {
			b.ReportMetric(v.t.Seconds()/vs[0].t.Seconds(), v.name+"/naive")
		}
	}
}
