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
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncMaxPending(txnats.DefaultMaxPending))
	if err != nil {
		b.Fatal(err)
	}
	// Without a stall wait longer than the 200ms default, a 10k loop fails
	// with ErrTooManyStalledMsgs once MaxPending is reached.
	stall := jetstream.WithStallWait(10 * time.Second)
	raw := func(msgs []*sender.Message) {
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

	var rawTime, senderTime time.Duration
	i := 0
	for b.Loop() {
		// Fresh ids each batch: the stream's duplicate window would
		// otherwise turn repeats into cheap duplicate acks.
		b.StopTimer()
		m1 := sendertest.NewMessages(benchBatch, route)
		m2 := sendertest.NewMessages(benchBatch, route)
		b.StartTimer()

		runRaw := func() {
			start := time.Now()
			raw(m1)
			rawTime += time.Since(start)
		}
		runSender := func() {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			err := s.Send(ctx, m2)
			cancel()
			senderTime += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
		}
		// Alternate which goes first: the stream grows with every batch.
		if i%2 == 0 {
			runRaw()
			runSender()
		} else {
			runSender()
			runRaw()
		}
		i++
	}
	n := float64(b.N * benchBatch)
	b.ReportMetric(n/rawTime.Seconds(), "raw-msgs/s")
	b.ReportMetric(n/senderTime.Seconds(), "sender-msgs/s")
	b.ReportMetric(rawTime.Seconds()/senderTime.Seconds(), "sender/raw")
}
