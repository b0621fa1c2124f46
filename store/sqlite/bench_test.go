package sqlite

import (
	"context"
	"database/sql"
	"fmt"
	"os"

	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// The benchmarks compare txbox with hand-written SQL doing the same work on
// the same schema, measured in the same run and interleaved step by step,
// so the shared, noisy machine slows both sides alike. They report ratios
// (txbox/bare) next to the raw figures. Results: docs/benchmarks/sqlite.md.

var benchPayload = []byte(`{"order_id":"0190f5c2-7c1e-7e1a-9d2b-3b1f4c5d6e7f","customer":"c-42","total_cents":129900,"currency":"EUR","items":[{"sku":"sku-1","qty":2},{"sku":"sku-2","qty":1}]}`)

func benchEvent() *txbox.Event {
	return &txbox.Event{ID: txbox.NewID(), Type: "bench", Payload: benchPayload, Headers: map[string]string{"h": "v"}}
}

// backlog is the drain benchmarks' backlog: TXBOX_BENCH_BACKLOG, default
// 20,000 rows.
func backlog() int {
	if v, err := strconv.Atoi(os.Getenv("TXBOX_BENCH_BACKLOG")); err == nil && v > 0 {
		return v
	}
	return 20000
}

// BenchmarkPublish: one business transaction inserting 1 or 100 events
// through OutboxInsert, against the same rows inserted by hand: one INSERT
// for a single event, a prepared INSERT executed per row for a batch
// (SQLite's fastest bulk path; it has no COPY).
func BenchmarkPublish(b *testing.B) {
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("events=%d", n), func(b *testing.B) {
			d := setup(b).d
			ctx := context.Background()
			bare := `INSERT INTO txbox_outbox (id, event_type, payload, headers) VALUES (?, ?, ?, ?)`
			var tBare, tBox time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				ids := make([]string, n)
				for j := range ids {
					ids[j] = txbox.NewID().String()
				}
				evs := make([]*txbox.Event, n)
				for j := range evs {
					evs[j] = benchEvent()
				}

				runBare := func() {
					tx, err := d.DB().BeginTx(ctx, nil)
					if err != nil {
						b.Fatal(err)
					}
					if n == 1 {
						_, err = tx.ExecContext(ctx, bare, ids[0], "bench", benchPayload, `{"h":"v"}`)
					} else {
						var st *sql.Stmt
						st, err = tx.PrepareContext(ctx, bare)
						for j := 0; err == nil && j < n; j++ {
							_, err = st.ExecContext(ctx, ids[j], "bench", benchPayload, `{"h":"v"}`)
						}
						if st != nil {
							st.Close()
						}
					}
					if err != nil {
						b.Fatal(err)
					}
					if err := tx.Commit(); err != nil {
						b.Fatal(err)
					}
				}
				runBox := func() { publish(b, d, evs...) }
				// Alternate which side goes first so neither always pays
				// for the other's WAL growth or checkpoint.
				if i%2 == 0 {
					tBare += timed(runBare)
					tBox += timed(runBox)
				} else {
					tBox += timed(runBox)
					tBare += timed(runBare)
				}
			}
			b.ReportMetric(float64(tBare.Nanoseconds())/float64(b.N), "bare-ns/tx")
			b.ReportMetric(float64(tBox.Nanoseconds())/float64(b.N), "txbox-ns/tx")
			b.ReportMetric(float64(tBox)/float64(tBare), "txbox/bare")
		})
	}
}

func timed(f func()) time.Duration {
	t0 := time.Now()
	f()
	return time.Since(t0)
}

// fill inserts n bench events into d in transactions of 500.
func fill(b *testing.B, d *Driver, n int) {
	b.Helper()
	for done := 0; done < n; {
		k := min(500, n-done)
		evs := make([]*txbox.Event, k)
		for i := range evs {
			evs[i] = benchEvent()
		}
		publish(b, d, evs...)
		done += k
	}
}

// bareClaimDelete is the baseline relay: one BEGIN IMMEDIATE transaction
// that deletes the next batch and returns it, the least a queue can do.
func bareClaimDelete(ctx context.Context, db *sql.DB, limit int) (int, error) {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback()
	rows, err := tx.QueryContext(ctx, `DELETE FROM txbox_outbox WHERE id IN (
    SELECT id FROM txbox_outbox
    WHERE status = 'PENDING' AND event_type = ? AND due_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
    ORDER BY due_at, id LIMIT ?)
RETURNING id, event_type, event_key, payload, headers, attempts, created_at`, "bench", limit)
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		var id, typ, headers, created string
		var key sql.NullString
		var payload []byte
		var attempts int
		if err := rows.Scan(&id, &typ, &key, &payload, &headers, &attempts, &created); err != nil {
			return 0, err
		}
		n++
	}
	if err := rows.Err(); err != nil {
		return 0, err
	}
	rows.Close()
	return n, tx.Commit()
}

// txboxDrainStep claims a batch and acks it all, as the relay does after
// its sends were acknowledged.
func txboxDrainStep(ctx context.Context, d *Driver, limit int, deleteAcked bool) (int, error) {
	rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "bench", Limit: limit, LeaseDuration: time.Minute})
	if err != nil || len(rows) == 0 {
		return 0, err
	}
	items := make([]store.OutboxFinishItem, len(rows))
	for i, r := range rows {
		items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
	}
	res, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: deleteAcked})
	if err != nil {
		return 0, err
	}
	if res.Finished != len(rows) {
		return 0, fmt.Errorf("finished %d of %d", res.Finished, len(rows))
	}
	return len(rows), nil
}

// BenchmarkDrain drains a backlog with claim + finish (batch 200), one
// relay, against the bare claim-and-delete loop on a second file with the
// same backlog, alternating batch by batch. retention=0 deletes acked
// rows; retention=keep marks them PROCESSED.
func BenchmarkDrain(b *testing.B) {
	const batch = 200
	for _, mode := range []string{"retention=0", "retention=keep"} {
		keep := mode == "retention=keep"
		b.Run(mode, func(b *testing.B) {
			ctx := context.Background()
			n := backlog()
			var tBare, tBox time.Duration
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				box := setup(b).d
				bare := setup(b).d
				fill(b, box, n)
				fill(b, bare, n)
				b.StartTimer()
				doneBare, doneBox := 0, 0
				for doneBare < n || doneBox < n {
					if doneBare < n {
						t0 := time.Now()
						k, err := bareClaimDelete(ctx, bare.DB(), batch)
						if err != nil {
							b.Fatal(err)
						}
						tBare += time.Since(t0)
						if k == 0 {
							b.Fatalf("bare drain stalled at %d", doneBare)
						}
						doneBare += k
					}
					if doneBox < n {
						t0 := time.Now()
						k, err := txboxDrainStep(ctx, box, batch, !keep)
						if err != nil {
							b.Fatal(err)
						}
						tBox += time.Since(t0)
						if k == 0 {
							b.Fatalf("txbox drain stalled at %d", doneBox)
						}
						doneBox += k
					}
				}
			}
			total := float64(n * b.N)
			b.ReportMetric(total/tBare.Seconds(), "bare-events/s")
			b.ReportMetric(total/tBox.Seconds(), "txbox-events/s")
			b.ReportMetric(tBare.Seconds()/tBox.Seconds(), "txbox/bare-rate")
		})
	}
}

// BenchmarkDrainConcurrent measures the in-process writer queue. For each
// mode (queue: the default; noqueue: goroutines meet only at SQLite's lock
// and its sleeping busy handler) it
//
//   - drains a backlog with 8 claiming goroutines (claim + finish, batch
//     100, delete on ack) and reports events/s;
//   - then runs 2 publishers (one event per transaction) against those 8
//     busy claimers and reports publishes/s and the p99 publish latency.
//
// Errors of any call (SQLITE_BUSY would be one) are counted and reported.
// Both modes run on their own files in the same run, order alternating.
func BenchmarkDrainConcurrent(b *testing.B) {
	const (
		batch     = 100
		claimers  = 8
		publishes = 300 // per publisher
	)
	ctx := context.Background()
	n := backlog()
	type result struct {
		drain, publish time.Duration
		lat            []time.Duration
		errs           int64
	}
	drain := func(d *Driver, stop <-chan struct{}, want int64, errs *atomic.Int64) {
		var wg sync.WaitGroup
		var drained atomic.Int64
		for c := 0; c < claimers; c++ {
			wg.Go(func() {
				for {
					if want > 0 && drained.Load() >= want {
						return
					}
					select {
					case <-stop:
						return
					default:
					}
					k, err := txboxDrainStep(ctx, d, batch, true)
					if err != nil {
						if errs.Add(1) > 100 {
							return
						}
						continue
					}
					drained.Add(int64(k))
					if k == 0 && want == 0 {
						time.Sleep(time.Millisecond) // idle poll
					}
				}
			})
		}
		wg.Wait()
	}
	run := func(d *Driver) result {
		var r result
		var errs atomic.Int64
		t0 := time.Now()
		drain(d, nil, int64(n), &errs)
		r.drain = time.Since(t0)

		stop := make(chan struct{})
		claimDone := make(chan struct{})
		go func() { drain(d, stop, 0, &errs); close(claimDone) }()
		var pubWG sync.WaitGroup
		var mu sync.Mutex
		t0 = time.Now()
		for p := 0; p < 2; p++ {
			pubWG.Go(func() {
				for i := 0; i < publishes; i++ {
					s := time.Now()
					tx, err := d.DB().BeginTx(ctx, nil)
					if err != nil {
						errs.Add(1)
						continue
					}
					if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{benchEvent()}}); err != nil {
						errs.Add(1)
						tx.Rollback()
						continue
					}
					if err := tx.Commit(); err != nil {
						errs.Add(1)
						continue
					}
					mu.Lock()
					r.lat = append(r.lat, time.Since(s))
					mu.Unlock()
				}
			})
		}
		pubWG.Wait()
		r.publish = time.Since(t0)
		close(stop)
		<-claimDone
		r.errs = errs.Load()
		return r
	}
	var q, nq []result
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		withQ := setup(b).d
		noQ := setup(b).d
		noQ.noWriterQueue = true
		fill(b, withQ, n)
		fill(b, noQ, n)
		b.StartTimer()
		if i%2 == 0 {
			q = append(q, run(withQ))
			nq = append(nq, run(noQ))
		} else {
			nq = append(nq, run(noQ))
			q = append(q, run(withQ))
		}
	}
	report := func(name string, rs []result) float64 {
		var dr, pub time.Duration
		var lat []time.Duration
		var errs int64
		for _, r := range rs {
			dr += r.drain
			pub += r.publish
			lat = append(lat, r.lat...)
			errs += r.errs
		}
		slices.Sort(lat)
		rate := float64(n*len(rs)) / dr.Seconds()
		b.ReportMetric(rate, name+"-drain-events/s")
		b.ReportMetric(float64(len(lat))/pub.Seconds(), name+"-publish/s")
		if len(lat) > 0 {
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, name+"-publish-p99-ms")
		}
		b.ReportMetric(float64(errs), name+"-errors")
		return rate
	}
	rq := report("queue", q)
	rnq := report("noqueue", nq)
	b.ReportMetric(rq/rnq, "queue/noqueue-drain")
}
