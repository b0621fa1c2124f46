package nats_test

import (
	"context"
	"testing"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox/sender"
	txnats "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/sender/sendertest"
)

const benchBatch = 10_000

// BenchmarkPublish10k compares the sender's Send of a 10k-message batch
// with the bare nats.go loop doing the same work (build each message with
// its headers, PublishMsgAsync it, then wait for every ack), on the same
// server and stream. The two alternate batch by batch, so noise from the
// shared machine hits both alike; the metric "sender/raw" is their
// throughput ratio. Figures: docs/benchmarks/senders-nats-webhook.md.
func BenchmarkPublish10k(b *testing.B) {
	st := newStream(b)
	route := sender.Route{Subject: st.subject()}

	nc, err := natsgo.Connect("nats://" + natsAddr(b))
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	// Two baselines: the bare loop, and the same loop with a per-message
	// ack timeout as the sender sets (without one, a lost ack would hold
	// its MaxPending slot forever). nats.go arms one timer per message for
	// it, which is most of the gap between the bare loop and the sender.
	jsBare, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(txnats.DefaultMaxPending))
	if err != nil {
		b.Fatal(err)
	}
	jsTimeout, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(txnats.DefaultMaxPending),
		jetstream.WithPublishAsyncTimeout(txnats.DefaultAckTimeout))
	if err != nil {
		b.Fatal(err)
	}
	// Without a stall wait longer than the 200ms default, a 10k loop fails
	// with ErrTooManyStalledMsgs once MaxPending is reached.
	stall := jetstream.WithStallWait(10 * time.Second)
	raw := func(js jetstream.JetStream, msgs []*sender.Message) {
		futures := make([]jetstream.PubAckFuture, len(msgs))
		for i, m := range msgs {
			h := make(natsgo.Header, len(m.Headers)+2)
			for k, v := range m.Headers {
				h[k] = []string{v}
			}
			h[txnats.HeaderMsgID] = []string{m.ID.String()}
			h[sender.HeaderKey] = []string{m.Key}
			f, err := js.PublishMsgAsync(&natsgo.Msg{Subject: m.Route.Subject, Data: m.Payload, Header: h}, stall)
			if err != nil {
				b.Fatal(err)
			}
			futures[i] = f
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				b.Fatal(err)
			}
		}
	}

	s := newSender(b, natsAddr(b), txnats.Config{})
	defer s.Close(context.Background())

	var bareTime, timeoutTime, senderTime time.Duration
	runs := []func(m []*sender.Message){
		func(m []*sender.Message) {
			start := time.Now()
			raw(jsBare, m)
			bareTime += time.Since(start)
		},
		func(m []*sender.Message) {
			start := time.Now()
			raw(jsTimeout, m)
			timeoutTime += time.Since(start)
		},
		func(m []*sender.Message) {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := s.Send(ctx, m)
			cancel()
			senderTime += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
		},
	}
	// Warm up all three (reply subscriptions, connections) before timing.
	for _, run := range runs {
		run(sendertest.NewMessages(benchBatch, route))
	}
	bareTime, timeoutTime, senderTime = 0, 0, 0
	i := 0
	for b.Loop() {
		// Fresh ids each batch: the stream's duplicate window would
		// otherwise turn repeats into cheap duplicate acks.
		b.StopTimer()
		batches := make([][]*sender.Message, len(runs))
		for j := range batches {
			batches[j] = sendertest.NewMessages(benchBatch, route)
		}
		b.StartTimer()
		// Rotate which goes first: the stream grows with every batch.
		for j := range runs {
			k := (i + j) % len(runs)
			runs[k](batches[k])
		}
		i++
	}
	n := float64(b.N * benchBatch)
	b.ReportMetric(n/bareTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(n/timeoutTime.Seconds(), "raw+timeout-msgs/s")
	b.ReportMetric(n/senderTime.Seconds(), "sender-msgs/s")
	b.ReportMetric(bareTime.Seconds()/senderTime.Seconds(), "sender/raw")
	b.ReportMetric(timeoutTime.Seconds()/senderTime.Seconds(), "sender/raw+timeout")
}
