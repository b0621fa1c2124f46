package e2e

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/internal/timing"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// BenchmarkPickupLatency measures, at 1k events/s (one event per
// transaction, one every millisecond) with PostgreSQL LISTEN/NOTIFY
// wake-ups and default polling, the time from the publisher sending its
// COMMIT to the relay handing the event to the sender (pickup), and to
// JetStream's ack. Target (docs/benchmarks.md): pickup p50 ≤ 5 ms, p99 ≤ 50 ms.
//
//	go test -run '^$' -bench PickupLatency -benchtime 1x ./e2e
func BenchmarkPickupLatency(b *testing.B) {
	const events = 3000
	for range b.N {
		ns := postgresKind.newNamespace(b)
		d := openStore(b, postgresKind, ns, 4).(*postgres.Driver)
		st := newStream(b)
		rec := timing.New(newBenchSender(b))
		cfg := relayConfig(openStore(b, postgresKind, ns, 8), rec, st.prefix, 0)
		cfg.Defaults.Polling = nil // the defaults: adaptive 250ms ×1.5 up to 1m
		r, err := relay.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := r.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		// Let the listener connect and the first polls go idle.
		time.Sleep(500 * time.Millisecond) // warm-up, not waiting for an effect
		ctx := context.Background()
		committed := make(map[txbox.ID]time.Time, events)
		tick := time.NewTicker(time.Millisecond)
		for range events {
			<-tick.C
			ev := &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte(`{}`)}
			tx, err := d.Pool().Begin(ctx)
			if err != nil {
				b.Fatal(err)
			}
			if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
				b.Fatal(err)
			}
			// Measured from the moment the COMMIT is sent: the relay may
			// be woken and claim before the commit's reply is back.
			committed[ev.ID] = time.Now()
			if err := tx.Commit(ctx); err != nil {
				b.Fatal(err)
			}
		}
		tick.Stop()
		testenv.WaitFor(b, 60*time.Second, "all events acked", func() bool { return rec.Acked() >= events })
		if err := r.Stop(ctx); err != nil {
			b.Fatal(err)
		}
		pick, ack := rec.Latencies(committed)
		p := func(ds []time.Duration, q float64) float64 {
			sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
			return float64(ds[int(q*float64(len(ds)-1))].Microseconds()) / 1000
		}
		b.ReportMetric(p(pick, 0.5), "pickup-p50-ms")
		b.ReportMetric(p(pick, 0.99), "pickup-p99-ms")
		b.ReportMetric(p(ack, 0.5), "acked-p50-ms")
		b.ReportMetric(p(ack, 0.99), "acked-p99-ms")
	}
}
