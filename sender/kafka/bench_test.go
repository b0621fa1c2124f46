package kafka_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/sender/kafka"
	"github.com/txbox/txbox/sender/sendertest"
)

// BenchmarkSendVsRaw sends the same batch of 200 messages (the relay's
// default batch size) through the txbox sender and through a bare
// franz-go client with the same producer options (Produce with a promise
// per record, wait for all), alternating the two in every iteration so
// both see the same machine load. It reports each side's rate and the
// ratio sender/raw of their total times (1.0 = no overhead).
func BenchmarkSendVsRaw(b *testing.B) {
	for _, l := range []struct {
		name   string
		linger time.Duration
	}{{"linger=0(default)", 0}, {"linger=5ms", 5 * time.Millisecond}} {
		b.Run(l.name, func(b *testing.B) { benchSendVsRaw(b, l.linger) })
	}
}

func benchSendVsRaw(b *testing.B, linger time.Duration) {
	const batch = 200
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, "bench"))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	cfg := kafka.Config{Brokers: c.ListenAddrs(), Linger: linger}
	s, err := kafka.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(context.Background())
	opts, err := cfg.Options()
	if err != nil {
		b.Fatal(err)
	}
	raw, err := kgo.NewClient(opts...)
	if err != nil {
		b.Fatal(err)
	}
	defer raw.Close()

	msgs := sendertest.NewMessages(batch, sender.Route{Topic: "bench"})
	rawBatch := func() {
		var wg sync.WaitGroup
		wg.Add(len(msgs))
		for _, m := range msgs {
			hs := make([]kgo.RecordHeader, 0, len(m.Headers))
			for k, v := range m.Headers {
				hs = append(hs, kgo.RecordHeader{Key: k, Value: []byte(v)})
			}
			raw.Produce(context.Background(), &kgo.Record{Topic: "bench", Key: []byte(m.Key), Value: m.Payload, Headers: hs},
				func(_ *kgo.Record, err error) {
					if err != nil {
						b.Error(err)
					}
					wg.Done()
				})
		}
		wg.Wait()
	}
	sendertest.SendVsRaw(b, s, msgs, rawBatch)
}
