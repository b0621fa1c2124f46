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
// rows in the same transaction shape.
func BenchmarkPublish(b *testing.B) {
	d := setup(b)
	db := d.DB()
	ctx := context.Background()
	p, err := outbox.NewPublisher(d, outbox.Config{})
	if err != nil {
		b.Fatal(err)
	}
	for _, n := range []int{1, 100} {
		b.Run(fmt.Sprintf("batch=%d/bare-insert", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				q, args := bareRows(n)
				benchTx(b, db, func(tx *sql.Tx) error { _, err := tx.ExecContext(ctx, q, args...); return err })
			}
		})
		b.Run(fmt.Sprintf("batch=%d/publisher", n), func(b *testing.B) {
			b.ReportAllocs()
			for range b.N {
				evs := benchEvents(n)
				benchTx(b, db, func(tx *sql.Tx) error { _, err := p.Publish(ctx, tx, evs...); return err })
			}
		})
	}
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

// BenchmarkDrain measures the relay's storage loop: claim a batch of 200,
// finish it as acked, until the backlog of b.N rows is gone. The baseline
// is the bare SQL a hand-written queue would run: BEGIN; SELECT the same
// columns FOR UPDATE SKIP LOCKED LIMIT 200; DELETE by id; COMMIT. ns/op is
// per event.
func BenchmarkDrain(b *testing.B) {
	d := setup(b)
	db := d.DB()
	ctx := context.Background()
	const batch = 200
	var seq int
	nextType := func() string { seq++; return fmt.Sprintf("drain-%d", seq) }

	b.Run("bare-claim-delete", func(b *testing.B) {
		typ := nextType()
		preload(b, db, typ, b.N)
		sel := "SELECT id, event_key, payload, headers, attempts, created_at FROM `txbox_outbox` FORCE INDEX (txbox_claim)" +
			" WHERE status = 'PENDING' AND event_type = ? AND due_at <= UTC_TIMESTAMP(6) ORDER BY due_at, id LIMIT ? FOR UPDATE SKIP LOCKED"
		b.ResetTimer()
		for drained := 0; drained < b.N; {
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
			if len(ids) == 0 {
				b.Fatalf("backlog empty after %d of %d", drained, b.N)
			}
			drained += len(ids)
		}
	})

	drain := func(b *testing.B, typ string, pollers int, deleteAcked bool) {
		var wg sync.WaitGroup
		var mu sync.Mutex
		drained := 0
		for range pollers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: typ, Limit: batch, LeaseDuration: time.Minute})
					if err != nil {
						b.Error(err)
						return
					}
					if len(rows) == 0 {
						return
					}
					items := make([]store.OutboxFinishItem, len(rows))
					for i, r := range rows {
						items[i] = store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked}
					}
					if _, err := d.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: deleteAcked}); err != nil {
						b.Error(err)
						return
					}
					mu.Lock()
					drained += len(rows)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if drained != b.N {
			b.Fatalf("drained %d of %d", drained, b.N)
		}
	}
	for _, c := range []struct {
		name    string
		pollers int
		del     bool
	}{
		{"driver-claim-finish-delete", 1, true},
		{"driver-claim-finish-processed", 1, false},
		{"driver-4-pollers-delete", 4, true},
	} {
		b.Run(c.name, func(b *testing.B) {
			typ := nextType()
			preload(b, db, typ, b.N)
			b.ResetTimer()
			drain(b, typ, c.pollers, c.del)
		})
	}
}
