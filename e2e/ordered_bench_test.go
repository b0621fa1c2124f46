package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store/postgres"
)

// BenchmarkOrderedDrain measures an ordered type (ordering: key, 50 keys)
// draining a backlog from PostgreSQL to NATS JetStream against the same
// type unordered, with default relay settings, both in the same run: each
// round drains a fresh unordered backlog, then a fresh ordered one of the
// same size, then another ordered one with commit-horizon: off, and the
// ratios are computed per round (the medians over TXBOX_BENCH_ROUNDS
// rounds are reported). Target (docs/benchmarks.md): ordered ≥ 50% of
// unordered. Figures in docs/benchmarks/relay.md:
//
//	TXBOX_BENCH_EVENTS=100000 TXBOX_BENCH_ROUNDS=3 go test -run '^$' -bench OrderedDrain -benchtime 1x ./e2e
//
// TXBOX_BENCH_KEYS changes the number of keys (default 50).
func BenchmarkOrderedDrain(b *testing.B) {
	testenv.RequireTCP(b, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(b, "NATS", "127.0.0.1:4222")
	n := benchEvents(b)
	rounds, keys := 1, 50
	for name, dst := range map[string]*int{"TXBOX_BENCH_ROUNDS": &rounds, "TXBOX_BENCH_KEYS": &keys} {
		if v := os.Getenv(name); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < 1 {
				b.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*dst = x
		}
	}
	for range b.N {
		var ratios, offRatios, horizonRatios, ordered, unordered []float64
		for range rounds {
			u := drainKeyed(b, n, keys, txbox.OrderingNone, txbox.CommitHorizonOn)
			o := drainKeyed(b, n, keys, txbox.OrderingKey, txbox.CommitHorizonOn)
			off := drainKeyed(b, n, keys, txbox.OrderingKey, txbox.CommitHorizonOff)
			unordered, ordered = append(unordered, u), append(ordered, o)
			ratios, offRatios, horizonRatios = append(ratios, o/u), append(offRatios, off/u), append(horizonRatios, o/off)
			b.Logf("round: unordered %.0f events/s, ordered %.0f events/s (ratio %.3f), ordered with the horizon off %.0f events/s (ratio %.3f); horizon on / off %.3f (%d events, %d keys)",
				u, o, o/u, off, off/u, o/off, n, keys)
		}
		b.ReportMetric(median(ordered), "ordered-events/s")
		b.ReportMetric(median(unordered), "unordered-events/s")
		b.ReportMetric(median(ratios), "ratio-ordered-to-unordered")
		b.ReportMetric(median(offRatios), "ratio-horizon-off-to-unordered")
		b.ReportMetric(median(horizonRatios), "ratio-horizon-on-to-off")
	}
}

// drainKeyed fills a fresh backlog of n events of type orders over keys
// keys (key i%keys, in id order) and drains it with one relay of default
// settings and the given ordering and commit horizon, returning events/s.
// For an ordered drain it also checks per-key order in the stream.
func drainKeyed(b *testing.B, n, keys int, ordering txbox.Ordering, horizon txbox.CommitHorizon) float64 {
	b.Helper()
	ctx := context.Background()
	ns := postgresKind.newNamespace(b)
	d := openStore(b, postgresKind, ns, 4).(*postgres.Driver)
	payload := []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","customer":"c-778"}`)
	keyOf := make(map[txbox.ID]string, n)
	for done := 0; done < n; {
		size := min(2000, n-done)
		evs := make([]*txbox.Event, size)
		for i := range evs {
			k := fmt.Sprintf("k%02d", (done+i)%keys)
			evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: k, Payload: payload}
			keyOf[evs[i].ID] = k
		}
		if err := postgresKind.publish(ctx, d, evs, true); err != nil {
			b.Fatal(err)
		}
		done += size
	}
	if _, err := d.Pool().Exec(ctx, "ANALYZE "+d.Tables().Schema+"."+d.Tables().Outbox); err != nil {
		b.Fatal(err)
	}
	st := newStream(b)
	rd := openStore(b, postgresKind, ns, 2*relay.DefaultInFlight+4)
	cfg := relayConfig(rd, newBenchSender(b), st.prefix, 0)
	cfg.Defaults.Ordering = &ordering
	cfg.Defaults.CommitHorizon = &horizon
	cfg.Cleanup.Disabled = true
	cfg.DiscoverInterval = -1
	timing := &timingHook{}
	cfg.Hooks = []txbox.RelayHook{timing}
	r, err := relay.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	testenv.WaitFor(b, 30*time.Minute, "backlog drained", func() bool { return outboxSettledOrders(b, d) })
	el := time.Since(start)
	b.StopTimer()
	if err := r.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	if ordering == txbox.OrderingKey {
		last := map[string]txbox.ID{}
		for _, m := range st.readAll(b) {
			k := keyOf[m.id]
			if prev, ok := last[k]; ok && string(prev[:]) > string(m.id[:]) {
				b.Fatalf("key %s: %s arrived after %s", k, m.id, prev)
			}
			last[k] = m.id
		}
	}
	if got := st.count(b); got != uint64(n) {
		b.Fatalf("stream holds %d messages, want %d", got, n)
	}
	b.Logf("%s (horizon %s): %d events in %v; %s", ordering, horizon, n, el.Round(time.Millisecond), timing)
	return float64(n) / el.Seconds()
}

// BenchmarkOrderedDrainDialects is BenchmarkOrderedDrain on MariaDB and
// SQLite, with a sender that acks at once (the storage side of the drain:
// claim, waves, finish), so the ratio shows what ordering costs in each
// dialect's claim. Default backlog 20,000 (TXBOX_BENCH_EVENTS):
//
//	TXBOX_BENCH_EVENTS=20000 TXBOX_BENCH_ROUNDS=3 go test -run '^$' -bench OrderedDrainDialects -benchtime 1x ./e2e
func BenchmarkOrderedDrainDialects(b *testing.B) {
	n := benchEvents(b)
	rounds := 1
	if v := os.Getenv("TXBOX_BENCH_ROUNDS"); v != "" {
		x, err := strconv.Atoi(v)
		if err != nil || x < 1 {
			b.Fatalf("TXBOX_BENCH_ROUNDS=%q: want a positive integer", v)
		}
		rounds = x
	}
	for _, kind := range storeKinds {
		if kind.name == "postgres" {
			continue // BenchmarkOrderedDrain, to NATS
		}
		b.Run(kind.name, func(b *testing.B) {
			for range b.N {
				var ratios, ordered, unordered []float64
				for range rounds {
					u := drainKind(b, kind, n, 50, txbox.OrderingNone)
					o := drainKind(b, kind, n, 50, txbox.OrderingKey)
					unordered, ordered = append(unordered, u), append(ordered, o)
					ratios = append(ratios, o/u)
					b.Logf("%s pair: unordered %.0f events/s, ordered %.0f events/s, ratio %.3f (%d events, 50 keys)", kind.name, u, o, o/u, n)
				}
				b.ReportMetric(median(ordered), "ordered-events/s")
				b.ReportMetric(median(unordered), "unordered-events/s")
				b.ReportMetric(median(ratios), "ratio-ordered-to-unordered")
			}
		})
	}
}

// drainKind drains a fresh backlog of n events over keys keys on kind
// with one relay of default settings and a sender that acks at once.
func drainKind(b *testing.B, kind storeKind, n, keys int, ordering txbox.Ordering) float64 {
	b.Helper()
	ctx := context.Background()
	ns := kind.newNamespace(b)
	d := openStore(b, kind, ns, 4)
	for done := 0; done < n; {
		size := min(500, n-done)
		evs := make([]*txbox.Event, size)
		for i := range evs {
			evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: fmt.Sprintf("k%02d", (done+i)%keys), Payload: []byte(`{"order_id":12345}`)}
		}
		if err := kind.publish(ctx, d, evs, true); err != nil {
			b.Fatal(err)
		}
		done += size
	}
	acks := &ackAllSender{}
	cfg := relayConfig(openStore(b, kind, ns, 2*relay.DefaultInFlight+4), acks, "unused", 0)
	cfg.Defaults.Ordering = &ordering
	cfg.Cleanup.Disabled = true
	cfg.DiscoverInterval = -1
	r, err := relay.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	start := time.Now()
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	testenv.WaitFor(b, 30*time.Minute, "backlog drained", func() bool { return acks.n.Load() >= int64(n) })
	el := time.Since(start)
	b.StopTimer()
	if err := r.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	return float64(n) / el.Seconds()
}

// ackAllSender acks every message at once and counts them.
type ackAllSender struct {
	noopSender
	n atomic.Int64
}

func (c *ackAllSender) Send(_ context.Context, msgs []*sender.Message) error {
	c.n.Add(int64(len(msgs)))
	return nil
}
