package nats_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	cnats "github.com/txbox/txbox/consume/nats"
	"github.com/txbox/txbox/inbox"
	"github.com/txbox/txbox/internal/consumetest"
	"github.com/txbox/txbox/internal/testenv"
)

// BenchmarkPull compares pulling on demand (the default: one round trip
// per message, nothing buffered) with a streamed pull whose client buffer
// is sized to the concurrency (both with Concurrency 1: SQLite, the inbox
// store here, has one writer), for a handler that only runs the inbox
// transaction and for one that also waits 5 ms. Results go to
// docs/benchmarks/consume.md as ratios to on demand.
func BenchmarkPull(b *testing.B) {
	for _, work := range []time.Duration{0, 5 * time.Millisecond} {
		for _, mode := range []struct {
			name string
			pmm  int
		}{{"on-demand", 0}, {"stream", 1}} {
			b.Run(fmt.Sprintf("handler=%s/%s", work, mode.name), func(b *testing.B) {
				js, subject, _ := stream(b)
				jc := durable(b, js, subject, "bench", 30*time.Second)
				env := consumetest.New(b, "nats-bench")
				for i := 0; i < b.N; i++ {
					publish(b, js, subject, txbox.NewID(), false)
				}
				var done atomic.Int64
				cons, err := cnats.New(jc, cnats.Config{Inbox: env.Inbox, PullMaxMessages: mode.pmm, Handler: func(ctx context.Context, tx any, m inbox.Message) error {
					if work > 0 {
						time.Sleep(work)
					}
					done.Add(1)
					return nil
				}})
				if err != nil {
					b.Fatal(err)
				}
				b.ResetTimer()
				ctx, cancel := context.WithCancel(context.Background())
				ran := make(chan error, 1)
				go func() { ran <- cons.Run(ctx) }()
				testenv.WaitFor(b, 10*time.Minute, "every message", func() bool { return done.Load() == int64(b.N) })
				b.StopTimer()
				cancel()
				<-ran
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "msgs/s")
			})
		}
	}
}
