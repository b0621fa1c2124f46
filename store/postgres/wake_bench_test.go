package postgres_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// BenchmarkWakeLatency measures how long after a publishing transaction
// sends its COMMIT the relay's listener is woken (NOTIFY → LISTEN on the
// dedicated connection), publishing one event per millisecond (1k
// events/s, the pickup-latency target's load, docs/benchmarks.md). It reports the p50 and p99 of
// that delay; the relay's claim comes on top.
func BenchmarkWakeLatency(b *testing.B) {
	const events = 2000
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := benchDriver(b, true)
	var (
		mu    sync.Mutex
		woken = map[string]time.Time{}
		got   = make(chan struct{}, events)
	)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = d.OutboxListen(ctx, func(typ string) {
			mu.Lock()
			if _, ok := woken[typ]; !ok {
				woken[typ] = time.Now()
			}
			mu.Unlock()
			got <- struct{}{}
		})
	}()
	defer func() { cancel(); <-done }()
	publish := func(typ string) time.Time {
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{{ID: txbox.NewID(), Type: typ}}, Notify: true}); err != nil {
			b.Fatal(err)
		}
		sent := time.Now()
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
		return sent
	}
	// Wait until the listener is in place.
	for ready := false; !ready; {
		publish("ready")
		select {
		case <-got:
			ready = true
		case <-time.After(50 * time.Millisecond):
		}
	}
	var lat []float64
	for b.Loop() {
		committed := make(map[string]time.Time, events)
		tick := time.NewTicker(time.Millisecond)
		for i := range events {
			<-tick.C
			typ := fmt.Sprintf("lat-%d-%d", len(lat), i)
			committed[typ] = publish(typ)
		}
		tick.Stop()
		deadline := time.After(30 * time.Second)
		for {
			mu.Lock()
			n := 0
			for typ := range committed {
				if _, ok := woken[typ]; ok {
					n++
				}
			}
			mu.Unlock()
			if n == len(committed) {
				break
			}
			select {
			case <-got:
			case <-deadline:
				b.Fatalf("%d of %d wake-ups arrived", n, len(committed))
			}
		}
		mu.Lock()
		for typ, at := range committed {
			lat = append(lat, float64(woken[typ].Sub(at)))
		}
		mu.Unlock()
	}
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2]/1e6, "p50-ms")
	b.ReportMetric(lat[len(lat)*99/100]/1e6, "p99-ms")
}
