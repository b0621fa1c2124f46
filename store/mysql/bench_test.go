package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/outbox"
	"github.com/txbox/txbox/store"
)

// Benchmarks compare the driver with bare SQL doing the same work on the
// same pool in the same run; docs/benchmarks/mysql.md records the ratios.
//
//	go test -run '^$' -bench . -benchtime 20000x -count 5 ./store/mysql/

var benchPayload = []byte(`{"order_id":"8b1f4c1e-2f0a-4a57-9d1c-0e6c2d7a9b10","customer":"c-1029","total_cents":129900,"currency":"EUR","items":[{"sku":"A-1","qty":2},{"sku":"B-7","qty":1}]}`)

const bareInsertSQL = "INSERT INTO `txbox_outbox` (id, event_type, event_key, payload, headers, due_at) VALUES "

func bareRows(n int) (string, []any) {
	var b strings.Builder
	b.WriteString(bareInsertSQL)
	args := make([]any, 0, 4*n)
	for i := range n {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("(?, ?, NULL, ?, ?, UTC_TIMESTAMP(6))")
		args = append(args, txbox.NewID().String(), "order-created", benchPayload, `{"content-type":"application/json"}`)
	}
	return b.String(), args
}

func benchEvents(n int) []txbox.Event {
	evs := make([]txbox.Event, n)
	for i := range evs {
		evs[i] = txbox.Event{Type: "order-created", Payload: benchPayload, Headers: map[string]string{"content-type": "application/json"}}
	}
	return evs
}

// inTx runs fn in a committed transaction on db, failing b on error.
func benchTx(b *testing.B, db *sql.DB, fn func(tx *sql.Tx) error) {
	tx, err := db.BeginTx(context.Background(), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := fn(tx); err != nil {
		tx.Rollback()
		b.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkPublish: one event, and a batch of 100, published through
// outbox.Publisher in a transaction, against a bare INSERT of the same
// rows in the same transaction shape. The machine is shared and noisy, so
// the two are interleaved op by op (alternating which goes first) and
// timed separately; the ratio metric is txbox time / bare time.
func BenchmarkPublish(b *testing.B) {
	d := setup(b)
	db := d.DB()
	ctx := context.Background()
	p, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d", n), func(b *testing.B) {
			var bare, txb time.Duration
			bareOp := func() {
				q, args := bareRows(n)
				t0 := time.Now()
				benchTx(b, db, func(tx *sql.Tx) error { _, err := tx.ExecContext(ctx, q, args...); return err })
				bare += time.Since(t0)
			}
			txboxOp := func() {
				evs := benchEvents(n)
				t0 := time.Now()
				benchTx(b, db, func(tx *sql.Tx) error { _, err := p.Publish(ctx, tx, evs...); return err })
				txb += time.Since(t0)
			}
			for i := range b.N {
				if i%2 == 0 {
					bareOp()
					txboxOp()
				} else {
					txboxOp()
					bareOp()
				}
			}
			reportPair(b, bare, txb, n)
		})
	}
}

// reportPair reports the two interleaved timings per event and their
// ratio.
func reportPair(b *testing.B, bare, txb time.Duration, perOp int) {
	events := float64(b.N * perOp)
	b.ReportMetric(float64(bare.Nanoseconds())/events, "bare-ns/event")
	b.ReportMetric(float64(txb.Nanoseconds())/events, "txbox-ns/event")
	b.ReportMetric(float64(txb)/float64(bare), "txbox/bare")
	b.ReportMetric(0, "ns/op") // the pair's wall time is not the figure
}

// preload inserts n pending rows of type typ with bare multi-row INSERTs.
func preload(b *testing.B, db *sql.DB, typ string, n int) {
	b.Helper()
	for n > 0 {
		c := min(n, 1000)
		q, args := bareRows(c)
		for i := 1; i < len(args); i += 4 {
			args[i] = typ
		}
		if _, err := db.Exec(q, args...); err != nil {
			b.Fatal(err)
		}
		n -= c
	}
}

// BenchmarkDrain measures the relay's storage loop: claim a batch of 200
// and finish it as acked (deleted on ack), until a backlog of b.N rows is
// gone. The baseline is the bare SQL a hand-written queue would run:
// BEGIN; SELECT the same columns FOR UPDATE SKIP LOCKED LIMIT 200; DELETE
// by id; COMMIT — which deletes before sending, so it is not at-least-once;
// the driver pays a second commit (claim, then finish) for that. The two
// drain separate backlogs of b.N rows, batch for batch, interleaved.
func BenchmarkDrain(b *testing.B) {
	d := setup(b)
	db := d.DB()
	ctx := context.Background()
	const batch = 200
	var seq int
	nextType := func() string { seq++; return fmt.Sprintf("drain-%d", seq) }
	sel := "SELECT id, event_key, payload, headers, attempts, created_at FROM `txbox_outbox` FORCE INDEX (txbox_claim)" +
		" WHERE status = 'PENDING' AND event_type = ? AND due_at <= UTC_TIMESTAMP(6) ORDER BY due_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
	bareBatch := func(typ string) int {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			b.Fatal(err)
		}
		rows, err := tx.QueryContext(ctx, sel, typ, batch)
		if err != nil {
			b.Fatal(err)
		}
		var ids []any
		for rows.Next() {
			var id, key, payload, headers []byte
			var attempts int
			var created time.Time
			if err := rows.Scan(&id, &key, &payload, &headers, &attempts, nullTime{&created}); err != nil {
				b.Fatal(err)
			}
			ids = append(ids, string(id))
		}
		rows.Close()
		if len(ids) > 0 {
			if _, err := tx.ExecContext(ctx, "DELETE FROM `txbox_outbox` WHERE id IN ("+placeholders(len(ids))+")", ids...); err != nil {
				b.Fatal(err)
			}
		}
		if err := tx.Commit(); err != nil {
			b.Fatal(err)
		}
		return len(ids)
	}
	driverBatch := func(typ string, deleteAcked bool) int {
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: batch, LeaseDuration: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if len(rows) == 0 {
			return 0
		}
		items := make([]store.OutboxFinishItem, len(rows))
		for i, r := range rows {
			items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
		}
		if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: deleteAcked}); err != nil {
			b.Fatal(err)
		}
		return len(rows)
	}
	for _, variant := range []string{"retention=0", "retention=kept"} {
		deleteAcked := variant != "retention=kept"
		b.Run(variant, func(b *testing.B) {
			bareType, txType := nextType(), nextType()
			preload(b, db, bareType, b.N)
			preload(b, db, txType, b.N)
			b.ResetTimer()
			var bare, txb time.Duration
			bareLeft, txLeft := b.N, b.N
			for i := 0; bareLeft > 0 || txLeft > 0; i++ {
				runBare := func() {
					if bareLeft > 0 {
						t0 := time.Now()
						bareLeft -= bareBatch(bareType)
						bare += time.Since(t0)
					}
				}
				runTx := func() {
					if txLeft > 0 {
						t0 := time.Now()
						txLeft -= driverBatch(txType, deleteAcked)
						txb += time.Since(t0)
					}
				}
				if i%2 == 0 {
					runBare()
					runTx()
				} else {
					runTx()
					runBare()
				}
			}
			reportPair(b, bare, txb, 1)
		})
	}

	// Four pollers on one backlog: absolute rate only (no bare twin).
	b.Run("retention=0/4-pollers", func(b *testing.B) {
		typ := nextType()
		preload(b, db, typ, b.N)
		b.ResetTimer()
		var wg sync.WaitGroup
		var mu sync.Mutex
		drained := 0
		t0 := time.Now()
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					n := driverBatch(typ, true)
					if n == 0 {
						return
					}
					mu.Lock()
					drained += n
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if drained != b.N {
			b.Fatalf("drained %d of %d", drained, b.N)
		}
		b.ReportMetric(float64(b.N)/time.Since(t0).Seconds(), "events/s")
	})
}
