package e2e

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/internal/timing"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// horizonScenario is one arrangement of BenchmarkOrderedHorizonLatency: the
// ordered type's claim, and how many other types drain a backlog next to
// it in the same relay, in which claim.
type horizonScenario struct {
	name         string
	orderedClaim txbox.ClaimMode
	others       int
	othersClaim  txbox.ClaimMode
	// horizonOff runs the ordered type with commit-horizon: off, the
	// control that shows what the other types' load costs without the
	// horizon.
	horizonOff bool
}

// horizonLatency is what one scenario measured of the ordered type, from
// the publisher sending COMMIT to the JetStream ack.
type horizonLatency struct {
	p50, p99 time.Duration
	samples  int
	// bulkRate is the other types' drain rate in events/s (0 alone).
	bulkRate float64
}

// BenchmarkOrderedHorizonLatency measures what the commit horizon costs an
// ordered type (ordering: key, horizon on, 20 keys, one event per
// transaction at 200 events/s, PostgreSQL → NATS JetStream) when other
// types of the same relay drain a backlog next to it: alone, next to 1, 4
// and 10 types in the lock claim, the same in the lease claim, and the
// ordered type itself in the lock and the lease claim; as a control, the
// ordered type with commit-horizon: off next to 1, 4 and 10 lock-claimed
// types, which separates the horizon's wait from the load the other types
// put on the machine. Every lock-claimed batch holds a transaction id for
// its whole send, and with it the horizon.
// It reports the commit-to-ack latency p50/p99 of each scenario, its
// ratio to the ordered type alone in the lock claim (the default for a
// broker) of the same round, and, on each control, the ratio of the horizon
// on to off next to the same types (horizon-on-to-off: what the horizon
// costs, under the same load); medians over TXBOX_BENCH_ROUNDS rounds.
// Only events committed while the backlog still drained are counted.
// Results in docs/benchmarks.md, "The commit horizon and lock claims":
//
//	TXBOX_BENCH_ROUNDS=2 go test -run '^$' -bench OrderedHorizonLatency -benchtime 1x -timeout 60m ./e2e
//
// Any transaction of the cluster that holds a transaction id holds the
// horizon, so run it on a cluster of its own (TXBOX_TEST_POSTGRES_URL) when
// other work shares the server.
// TXBOX_BENCH_EVENTS is the backlog of each scenario, split over its other
// types (default 200,000).
func BenchmarkOrderedHorizonLatency(b *testing.B) {
	testenv.RequireTCP(b, "PostgreSQL", testenv.PostgresAddr)
	testenv.RequireTCP(b, "NATS", "127.0.0.1:4222")
	backlog, rounds := 200_000, 1
	for name, dst := range map[string]*int{"TXBOX_BENCH_EVENTS": &backlog, "TXBOX_BENCH_ROUNDS": &rounds} {
		if v := os.Getenv(name); v != "" {
			x, err := strconv.Atoi(v)
			if err != nil || x < 1 {
				b.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*dst = x
		}
	}
	scenarios := []horizonScenario{
		{name: "alone-lock", orderedClaim: txbox.ClaimLock},
		{name: "alone-lease", orderedClaim: txbox.ClaimLease},
	}
	// Each horizon-off control runs right after its horizon-on pair, so that
	// the two see the same load on the machine.
	for _, n := range []int{1, 4, 10} {
		scenarios = append(scenarios,
			horizonScenario{name: fmt.Sprintf("next-to-%d-lock", n), orderedClaim: txbox.ClaimLock, others: n, othersClaim: txbox.ClaimLock},
			horizonScenario{name: fmt.Sprintf("horizon-off-next-to-%d-lock", n), orderedClaim: txbox.ClaimLock, others: n, othersClaim: txbox.ClaimLock, horizonOff: true},
			horizonScenario{name: fmt.Sprintf("next-to-%d-lease", n), orderedClaim: txbox.ClaimLock, others: n, othersClaim: txbox.ClaimLease})
	}
	scenarios = append(scenarios, horizonScenario{name: "lease-next-to-10-lock",
		orderedClaim: txbox.ClaimLease, others: 10, othersClaim: txbox.ClaimLock})
	p50, p99 := map[string][]float64{}, map[string][]float64{}
	r50, r99 := map[string][]float64{}, map[string][]float64{}
	on50, on99 := map[string][]float64{}, map[string][]float64{}
	for round := range rounds {
		var base horizonLatency
		got := map[string]horizonLatency{}
		for i, sc := range scenarios {
			// A sub-benchmark each, so that its pools close before the
			// next scenario opens its own.
			b.Run(fmt.Sprintf("round-%d/%s", round+1, sc.name), func(b *testing.B) {
				l := measureHorizon(b, sc, backlog)
				if i == 0 {
					base = l
				}
				got[sc.name] = l
				p50[sc.name] = append(p50[sc.name], ms(l.p50))
				p99[sc.name] = append(p99[sc.name], ms(l.p99))
				r50[sc.name] = append(r50[sc.name], ms(l.p50)/ms(base.p50))
				r99[sc.name] = append(r99[sc.name], ms(l.p99)/ms(base.p99))
				b.ReportMetric(ms(l.p50), "p50-ms")
				b.ReportMetric(ms(l.p99), "p99-ms")
				b.ReportMetric(ms(l.p50)/ms(base.p50), "p50-ratio")
				b.ReportMetric(ms(l.p99)/ms(base.p99), "p99-ratio")
				b.ReportMetric(float64(l.samples), "samples")
				b.ReportMetric(l.bulkRate, "others-events/s")
				if on, ok := got[strings.TrimPrefix(sc.name, "horizon-off-")]; ok && sc.horizonOff {
					on50[sc.name] = append(on50[sc.name], ms(on.p50)/ms(l.p50))
					on99[sc.name] = append(on99[sc.name], ms(on.p99)/ms(l.p99))
					b.ReportMetric(ms(on.p50)/ms(l.p50), "horizon-on-to-off-p50")
					b.ReportMetric(ms(on.p99)/ms(l.p99), "horizon-on-to-off-p99")
				}
			})
		}
	}
	// A sub-benchmark of its own, so that its log is printed.
	b.Run("medians", func(b *testing.B) {
		for _, sc := range scenarios {
			if len(p50[sc.name]) == 0 {
				continue
			}
			b.Logf("median of %d rounds: %-26s p50 %7.2f ms  p99 %7.2f ms  (×%.2f / ×%.2f of alone-lock)",
				len(p50[sc.name]), sc.name, median(p50[sc.name]), median(p99[sc.name]), median(r50[sc.name]), median(r99[sc.name]))
			if len(on50[sc.name]) > 0 {
				b.Logf("median of %d rounds: horizon on / off next to the same types, p50 ×%.2f, p99 ×%.2f (%s)",
					len(on50[sc.name]), median(on50[sc.name]), median(on99[sc.name]), strings.TrimPrefix(sc.name, "horizon-off-"))
			}
		}
	})
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// measureHorizon runs one scenario in a fresh schema and stream: it fills
// the other types' backlog, starts one relay, waits for the backlog to
// start draining, then publishes the ordered type at 200 events/s until
// the backlog is gone (at most 20 s; at least 1 s alone).
func measureHorizon(b *testing.B, sc horizonScenario, backlog int) horizonLatency {
	b.Helper()
	ctx := context.Background()
	ns := postgresKind.newNamespace(b)
	d := openStore(b, postgresKind, ns, 4).(*postgres.Driver)
	bulk := fillOthers(b, d, sc.others, backlog)
	st := newStream(b)
	rec := timing.New(newBenchSender(b))
	rd := openStore(b, postgresKind, ns, relay.DefaultInFlight*(sc.others+1)+relay.LockReserve+4)
	cfg := relayConfig(rd, rec, st.prefix, 0)
	cfg.Cleanup.Disabled = true
	cfg.DiscoverInterval = -1
	cfg.Defaults.Polling = nil // the defaults, woken by NOTIFY
	horizon := txbox.CommitHorizonOn
	if sc.horizonOff {
		horizon = txbox.CommitHorizonOff
	}
	cfg.Events = map[string]relay.EventSettings{"ordered": {Ordering: new(txbox.OrderingKey), CommitHorizon: &horizon, Claim: new(sc.orderedClaim)}}
	for t := range sc.others {
		cfg.Events[fmt.Sprintf("bulk%02d", t)] = relay.EventSettings{Claim: new(sc.othersClaim)}
	}
	r, err := relay.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		b.Fatal(err)
	}
	acked := func() (all, ofBulk int) {
		n := rec.Acked()
		return n, n - rec.AckedOf("ordered")
	}
	if sc.others > 0 {
		testenv.WaitFor(b, time.Minute, "backlog draining", func() bool { _, n := acked(); return n > 0 })
	} else {
		time.Sleep(500 * time.Millisecond) // warm-up: the listener connects and the first polls go idle
	}
	start := time.Now()
	committed := map[txbox.ID]time.Time{}
	tick := time.NewTicker(5 * time.Millisecond)
	for i := 0; ; i++ {
		<-tick.C
		el := time.Since(start)
		if _, n := acked(); el > 20*time.Second || (sc.others == 0 && el > 5*time.Second) ||
			(sc.others > 0 && n >= len(bulk)) {
			break
		}
		ev := &txbox.Event{ID: txbox.NewID(), Type: "ordered", Key: fmt.Sprintf("k%02d", i%20), Payload: []byte(`{"order_id":12345}`)}
		tx, err := d.Pool().Begin(ctx)
		if err != nil {
			b.Fatal(err)
		}
		if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}, Notify: true}); err != nil {
			b.Fatal(err)
		}
		committed[ev.ID] = time.Now() // from the moment the COMMIT is sent
		if err := tx.Commit(ctx); err != nil {
			b.Fatal(err)
		}
	}
	tick.Stop()
	testenv.WaitFor(b, 5*time.Minute, "every event acked", func() bool { n, _ := acked(); return n >= len(bulk)+len(committed) })
	if err := r.Stop(ctx); err != nil {
		b.Fatal(err)
	}
	var bulkEnd time.Time
	for id := range bulk {
		if _, a := rec.Times(id); a.After(bulkEnd) {
			bulkEnd = a
		}
	}
	var lat []time.Duration
	for id, c := range committed {
		if _, a := rec.Times(id); sc.others == 0 || c.Before(bulkEnd) {
			lat = append(lat, max(a.Sub(c), 0))
		}
	}
	if len(lat) < 100 {
		b.Fatalf("%s: only %d events were committed while the backlog drained; raise TXBOX_BENCH_EVENTS", sc.name, len(lat))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	l := horizonLatency{p50: lat[len(lat)/2], p99: lat[int(0.99*float64(len(lat)-1))], samples: len(lat)}
	if sc.others > 0 {
		l.bulkRate = float64(len(bulk)) / bulkEnd.Sub(start).Seconds()
	}
	return l
}

// fillOthers fills a backlog of n events split over the types bulk00,
// bulk01, … (others of them), in transactions of 2,000, and returns their
// ids.
func fillOthers(b *testing.B, d *postgres.Driver, others, n int) map[txbox.ID]bool {
	b.Helper()
	ctx := context.Background()
	bulk := make(map[txbox.ID]bool, n)
	payload := []byte(`{"order_id":12345,"amount":"99.90","currency":"EUR","customer":"c-778"}`)
	for t := range others {
		typ := fmt.Sprintf("bulk%02d", t)
		for done, per := 0, n/others; done < per; {
			evs := make([]*txbox.Event, min(2000, per-done))
			for i := range evs {
				evs[i] = &txbox.Event{ID: txbox.NewID(), Type: typ, Payload: payload}
				bulk[evs[i].ID] = true
			}
			if err := postgresKind.publish(ctx, d, evs, true); err != nil {
				b.Fatal(err)
			}
			done += len(evs)
		}
	}
	if _, err := d.Pool().Exec(ctx, "ANALYZE "+d.Tables().Schema+"."+d.Tables().Outbox); err != nil {
		b.Fatal(err)
	}
	return bulk
}
