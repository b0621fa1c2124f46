package e2e

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/sender"
	natssender "github.com/txbox/txbox/sender/nats"
	"github.com/txbox/txbox/store/postgres"
)

// benchEvents is the backlog size of the drain benchmark:
// TXBOX_BENCH_EVENTS, default 20,000 (use 200000 or 1000000 for the
// figures in docs/benchmarks/relay.md).
func benchEvents(b *testing.B) int {
	if v := os.Getenv("TXBOX_BENCH_EVENTS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			b.Fatalf("TXBOX_BENCH_EVENTS=%q: want a positive integer", v)
		}
		return n
	}
	return 20_000
}

// fillBacklog inserts n events of type "orders" in transactions of 2,000.
func fillBacklog(b *testing.B, d *postgres.Driver, n int) {
	b.Helper()
	ctx := context.Background()
	payload := []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","customer":"c-778"}`)
	for done := 0; done < n; {
		size := min(2000, n-done)
		evs := make([]*txbox.Event, size)
		for i := range evs {
			evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Key: strconv.Itoa(i % 64), Payload: payload,
				Headers: map[string]string{"content-type": "application/json"}}
		}
		if err := postgresKind.publish(ctx, d, evs, true); err != nil {
			b.Fatal(err)
		}
		done += size
	}
	// Fresh statistics, as a long-running table would have.
	if _, err := d.Pool().Exec(ctx, "ANALYZE "+d.Tables().Schema+"."+d.Tables().Outbox); err != nil {
		b.Fatal(err)
	}
}

// bareDrain is the baseline: one connection claiming and deleting batches
// of 200 in one statement, sending nowhere. It is the floor cost of taking
// rows out of the table, with none of the relay's work (lease, send,
// fenced finish).
func bareDrain(b *testing.B, d *postgres.Driver) int {
	b.Helper()
	ctx := context.Background()
	q := fmt.Sprintf(`WITH c AS (
	SELECT id FROM %[1]s WHERE status = 'PENDING' AND event_type = $1 AND due_at <= now()
	ORDER BY due_at, id LIMIT 200 FOR UPDATE SKIP LOCKED)
DELETE FROM %[1]s o USING c WHERE o.id = c.id RETURNING o.id, o.payload, o.headers`,
		pgx.Identifier{d.Tables().Schema, d.Tables().Outbox}.Sanitize())
	total := 0
	for {
		rows, err := d.Pool().Query(ctx, q, "orders")
		if err != nil {
			b.Fatal(err)
		}
		n := 0
		for rows.Next() {
			n++
		}
		if err := rows.Err(); err != nil {
			b.Fatal(err)
		}
		total += n
		if n == 0 {
			return total
		}
	}
}

// relayVariant is one relay configuration measured by BenchmarkDrain.
type relayVariant struct {
	name      string
	batch     int
	inFlight  int
	relays    int
	retention time.Duration
	// noop replaces NATS by a sender that acks at once: the relay's
	// database-side ceiling, for locating where time goes.
	noop bool
}

// BenchmarkDrain measures draining a backlog from PostgreSQL to NATS
// JetStream against the bare claim-and-delete loop on the same database.
// The machine is shared and its load drifts within seconds, so every relay
// measurement is paired with a bare-loop measurement taken right before
// it on a fresh backlog of the same size, and the ratio is computed per
// pair (TXBOX_BENCH_ROUNDS pairs, default 1; the median ratio is
// reported). Run with -benchtime 1x:
//
//	TXBOX_BENCH_EVENTS=200000 TXBOX_BENCH_ROUNDS=3 go test -run '^$' -bench 'Drain$' -benchtime 1x ./e2e
//
// TXBOX_BENCH_VARIANTS=default,inflight=8 selects variants by name.
func BenchmarkDrain(b *testing.B) {
	testenv.RequireTCP(b, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(b, "NATS", "127.0.0.1:4222")
	n := benchEvents(b)
	rounds := 1
	if v := os.Getenv("TXBOX_BENCH_ROUNDS"); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 {
			b.Fatalf("TXBOX_BENCH_ROUNDS=%q: want a positive integer", v)
		}
		rounds = r
	}
	variants := []relayVariant{
		{name: "default", batch: relay.DefaultBatchSize, inFlight: relay.DefaultInFlight, relays: 1, retention: 0},
		{name: "inflight=1", batch: relay.DefaultBatchSize, inFlight: 1, relays: 1, retention: 0},
		{name: "inflight=8", batch: relay.DefaultBatchSize, inFlight: 8, relays: 1, retention: 0},
		{name: "batch=500", batch: 500, inFlight: relay.DefaultInFlight, relays: 1, retention: 0},
		{name: "keep-processed", batch: relay.DefaultBatchSize, inFlight: relay.DefaultInFlight, relays: 1, retention: 24 * time.Hour},
		{name: "2-relays", batch: relay.DefaultBatchSize, inFlight: relay.DefaultInFlight, relays: 2, retention: 0},
		{name: "noop-sender", batch: relay.DefaultBatchSize, inFlight: relay.DefaultInFlight, relays: 1, retention: 0, noop: true},
	}
	if only := os.Getenv("TXBOX_BENCH_VARIANTS"); only != "" {
		var keep []relayVariant
		for _, v := range variants {
			if strings.Contains(","+only+",", ","+v.name+",") {
				keep = append(keep, v)
			}
		}
		variants = keep
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				var ratios, rates, bares []float64
				for range rounds {
					bare := bareRate(b, n)
					rate := drainWithRelay(b, n, v)
					bares = append(bares, bare)
					rates = append(rates, rate)
					ratios = append(ratios, rate/bare)
					b.Logf("%s pair: bare %.0f events/s, relay %.0f events/s, ratio %.3f", v.name, bare, rate, rate/bare)
				}
				b.ReportMetric(median(rates), "events/s")
				b.ReportMetric(median(bares), "bare-events/s")
				b.ReportMetric(median(ratios), "ratio-to-bare")
			}
		})
	}
}

// bareRate fills a fresh backlog of n events and drains it with the bare
// loop, returning events/s.
func bareRate(b *testing.B, n int) float64 {
	b.Helper()
	ns := postgresKind.newNamespace(b)
	d := openStore(b, postgresKind, ns, 4).(*postgres.Driver)
	fillBacklog(b, d, n)
	start := time.Now()
	got := bareDrain(b, d)
	el := time.Since(start)
	if got != n {
		b.Fatalf("bare loop drained %d of %d", got, n)
	}
	return float64(n) / el.Seconds()
}

func median(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func drainWithRelay(b *testing.B, n int, v relayVariant) float64 {
	b.Helper()
	ns := postgresKind.newNamespace(b)
	d := openStore(b, postgresKind, ns, 4).(*postgres.Driver)
	fillBacklog(b, d, n)
	st := newStream(b)
	var relays []*relay.Relay
	timing := &timingHook{}
	for range v.relays {
		rd := openStore(b, postgresKind, ns, 2*v.inFlight+4)
		var s sender.Sender = newBenchSender(b)
		if v.noop {
			s = noopSender{}
		}
		cfg := relayConfig(rd, s, st.prefix, v.retention)
		cfg.Defaults.BatchSize = &v.batch
		cfg.Defaults.InFlight = &v.inFlight
		cfg.Cleanup.Disabled = true
		cfg.Hooks = []txbox.RelayHook{timing}
		cfg.DiscoverInterval = -1
		r, err := relay.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		relays = append(relays, r)
	}
	b.ResetTimer()
	start := time.Now()
	for _, r := range relays {
		if err := r.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	// Memory must stay flat in the backlog size: sample the heap while
	// the backlog drains (the backlog itself lives in PostgreSQL).
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	baseHeap, peakHeap := ms.HeapAlloc, ms.HeapAlloc
	testenv.WaitFor(b, 30*time.Minute, "backlog drained", func() bool {
		runtime.ReadMemStats(&ms)
		peakHeap = max(peakHeap, ms.HeapAlloc)
		return outboxSettledOrders(b, d)
	})
	el := time.Since(start)
	b.StopTimer()
	for _, r := range relays {
		if err := r.Stop(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
	if got := st.count(b); got != uint64(n) && !v.noop {
		b.Fatalf("stream holds %d messages, want %d", got, n)
	}
	b.Logf("%s: %d events in %v; %s; heap peak %.1f MiB over %.1f MiB at start",
		v.name, n, el.Round(time.Millisecond), timing, float64(peakHeap-baseHeap)/(1<<20), float64(baseHeap)/(1<<20))
	return float64(n) / el.Seconds()
}

// timingHook adds up where a drain's time goes: claim statements, sends,
// and whole batches (send + finish, measured from the send's start).
type timingHook struct {
	txbox.NopRelayHook
	mu                  sync.Mutex
	claims, batches     int
	claimTime, sendTime time.Duration
	finishTime          time.Duration
}

func (h *timingHook) OnPoll(ev txbox.PollEvent) {
	h.mu.Lock()
	h.claims++
	h.claimTime += ev.Duration
	h.mu.Unlock()
}

func (h *timingHook) OnBatch(ev txbox.BatchEvent) {
	h.mu.Lock()
	h.batches++
	h.sendTime += ev.SendDuration
	h.finishTime += ev.FinishDuration
	h.mu.Unlock()
}

func (h *timingHook) String() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	avg := func(d time.Duration, n int) time.Duration {
		if n == 0 {
			return 0
		}
		return (d / time.Duration(n)).Round(10 * time.Microsecond)
	}
	return fmt.Sprintf("%d claims avg %v, %d batches: send avg %v, finish avg %v",
		h.claims, avg(h.claimTime, h.claims), h.batches, avg(h.sendTime, h.batches), avg(h.finishTime, h.batches))
}

// outboxSettledOrders is outboxSettled with a cheaper query: the drain
// benchmark polls it often.
func outboxSettledOrders(b *testing.B, d *postgres.Driver) bool {
	var left bool
	q := fmt.Sprintf(`SELECT EXISTS (SELECT 1 FROM %s WHERE status IN ('PENDING', 'IN_PROCESS'))`,
		pgx.Identifier{d.Tables().Schema, d.Tables().Outbox}.Sanitize())
	if err := d.Pool().QueryRow(context.Background(), q).Scan(&left); err != nil {
		b.Fatal(err)
	}
	return !left
}

func newBenchSender(b *testing.B) *natssender.Sender {
	b.Helper()
	s, err := natssender.New(natssender.Config{URL: testenv.NATSURL})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close(context.Background()) })
	return s
}

type noopSender struct{}

func (noopSender) Send(context.Context, []*sender.Message) error { return nil }
func (noopSender) Close(context.Context) error                   { return nil }
