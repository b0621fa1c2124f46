package sendertest

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/sender"
)

// SendVsRaw is the loop of a benchmark that sets a sender against the
// broker's own client: every iteration sends msgs once through s and once
// through raw (the same messages published directly, the same way),
// alternating which goes first so both see the same machine load, after
// one warm-up of each (connections, producer ids, metadata). It reports
// raw-msgs/s, sender-msgs/s and sender/raw, the ratio of the total times
// (1.0 = no overhead; docs/benchmarks.md).
func SendVsRaw(b *testing.B, s sender.Sender, msgs []*sender.Message, raw func()) {
	b.Helper()
	senderBatch := func() {
		if err := s.Send(context.Background(), msgs); err != nil {
			b.Fatal(err)
		}
	}
	raw()
	senderBatch()

	var tRaw, tSender time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		first, second, t1, t2 := raw, senderBatch, &tRaw, &tSender
		if i%2 == 1 {
			first, second, t1, t2 = senderBatch, raw, &tSender, &tRaw
		}
		start := time.Now()
		first()
		mid := time.Now()
		second()
		*t1 += mid.Sub(start)
		*t2 += time.Since(mid)
	}
	b.StopTimer()
	n := float64(b.N * len(msgs))
	b.ReportMetric(n/tRaw.Seconds(), "raw-msgs/s")
	b.ReportMetric(n/tSender.Seconds(), "sender-msgs/s")
	b.ReportMetric(tSender.Seconds()/tRaw.Seconds(), "sender/raw")
}
