package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// handlerReads sums the session's Handler_read_* counters: every index or
// table row InnoDB handed to the server. db must have one connection so
// the session is the driver's.
func handlerReads(t testing.TB, db *sql.DB) int64 {
	t.Helper()
	rows, err := db.Query("SHOW SESSION STATUS LIKE 'Handler_read%'")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var sum int64
	for rows.Next() {
		var name string
		var v int64
		if err := rows.Scan(&name, &v); err != nil {
			t.Fatal(err)
		}
		sum += v
	}
	return sum
}

// bulkInsert fills the outbox fast with plain multi-row INSERTs.
func bulkInsert(t testing.TB, db *sql.DB, table string, n int, row func(i int) (typ, key, status string)) {
	t.Helper()
	const chunk = 2000
	for start := 0; start < n; start += chunk {
		var b strings.Builder
		b.WriteString("INSERT INTO " + table + " (id, event_type, event_key, payload, status, processed_at) VALUES ")
		var args []any
		for i := start; i < min(n, start+chunk); i++ {
			if i > start {
				b.WriteString(",")
			}
			typ, key, status := row(i)
			var k any
			if key != "" {
				k = key
			}
			b.WriteString("(?, ?, ?, 'x', ?, IF(? = 'PROCESSED', UTC_TIMESTAMP(6), NULL))")
			args = append(args, txbox.NewID().String(), typ, k, status, status)
		}
		if _, err := db.Exec(b.String(), args...); err != nil {
			t.Fatal(err)
		}
	}
}

// TestClaimReadsOBatch proves with InnoDB's own row counters that a claim
// (plain and ordered by key) and the pending-types scan read O(batch) and
// O(types) rows, not O(table), on an outbox with 100k rows (1M with
// TXBOX_CHAOS set): half pending across 5 types, half processed.
func TestClaimReadsOBatch(t *testing.T) {
	t.Parallel()
	n := 100_000
	if os.Getenv("TXBOX_CHAOS") != "" {
		n = 1_000_000
	}
	_, dsn := newDatabase(t)
	db, err := OpenDB(dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	d, err := New(db, Config{SessionReadCommitted: true})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bulkInsert(t, db, d.qOutbox, n, func(i int) (string, string, string) {
		status := store.StatusPending
		if i%2 == 1 {
			status = store.StatusProcessed
		}
		// 1000 keys, interleaved, so the heads of all keys come first in
		// due order only by accident of insertion, not by construction.
		return fmt.Sprintf("type-%d", i%5), fmt.Sprintf("k%d", i%1000), status
	})
	if _, err := db.Exec("ANALYZE TABLE " + d.qOutbox); err != nil {
		t.Fatal(err)
	}
	t.Logf("inserted %d rows in %v", n, time.Since(start))

	// What reading the counters costs by itself (SHOW STATUS fills a
	// temporary table).
	base := handlerReads(t, db)
	overhead := handlerReads(t, db) - base

	measure := func(name string, limit int64, fn func()) {
		t.Helper()
		before := handlerReads(t, db)
		fn()
		reads := handlerReads(t, db) - before - overhead
		t.Logf("%s: %d handler reads", name, reads)
		if reads > limit {
			t.Errorf("%s read %d rows, want at most %d on a %d-row table", name, reads, limit, n)
		}
	}
	const batch = 100
	measure("claim", 5*batch, func() {
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "type-3", Limit: batch, LeaseDuration: time.Minute})
		if err != nil || len(rows) != batch {
			t.Fatalf("claim: %d rows, %v", len(rows), err)
		}
	})
	measure("ordered claim", 20*batch, func() {
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "type-2", Limit: batch, LeaseDuration: time.Minute, OrderedByKey: true})
		if err != nil || len(rows) != batch {
			t.Fatalf("ordered claim: %d rows, %v", len(rows), err)
		}
	})
	// Fan-out (schema version 7): the expansion of a batch, and the claims
	// of a route, on a type whose other pending rows are not expanded yet
	// (they hold their keys on every route).
	measure("expand", 20*batch, func() {
		n, err := d.OutboxExpand(ctx, &store.OutboxExpandParams{EventType: "type-4", Routes: []string{"a", "b"}, Limit: batch})
		if err != nil || n != batch {
			t.Fatalf("expand: %d, %v", n, err)
		}
	})
	measure("route claim", 5*batch, func() {
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "type-4", Route: "b", Limit: batch, LeaseDuration: time.Minute})
		if err != nil || len(rows) != batch {
			t.Fatalf("route claim: %d rows, %v", len(rows), err)
		}
	})
	measure("ordered route claim", 20*batch, func() {
		if _, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "type-4", Route: "a", Limit: batch, LeaseDuration: time.Minute, OrderedByKey: true}); err != nil {
			t.Fatalf("ordered route claim: %v", err)
		}
	})
	measure("pending types", 50, func() {
		types, err := d.OutboxPendingTypes(ctx)
		if err != nil || len(types) != 5 {
			t.Fatalf("pending types: %v, %v", types, err)
		}
	})
	measure("recover (nothing expired)", 5*batch, func() {
		if _, err := d.OutboxRecover(ctx, &store.OutboxRecoverParams{Limit: 100}); err != nil {
			t.Fatal(err)
		}
	})
	// Stats is O(pending) by design (exact counts and the exact oldest
	// pending row); logged, bounded by the table size.
	measure("stats", 3*int64(n), func() {
		t0 := time.Now()
		if _, err := d.OutboxStats(ctx); err != nil {
			t.Fatal(err)
		}
		t.Logf("stats took %v", time.Since(t0))
	})
	measure("cleanup (nothing old enough)", 50, func() {
		if _, err := d.OutboxCleanup(ctx, &store.CleanupParams{OlderThan: time.Hour, Limit: 100}); err != nil {
			t.Fatal(err)
		}
	})
}

// TestFinishWritesByPrimaryKeyOnly: every statement of a finish (mixed
// outcomes, several lease tokens, with and without DeleteAcked) can only
// be driven by the primary key, so it locks rows in key order and never
// secondary index entries first (docs/schema/mysql.md, "Lock order"). EXPLAIN lists
// the indexes the optimizer could use.
func TestFinishWritesByPrimaryKeyOnly(t *testing.T) {
	t.Parallel()
	d := setup(t)
	evs := publish(t, d, events("plan", 400)...)
	bulkInsert(t, d.DB(), d.qOutbox, 2000, func(int) (string, string, string) { return "plan", "", store.StatusInProcess })
	if _, err := d.DB().Exec("ANALYZE TABLE " + d.qOutbox); err != nil {
		t.Fatal(err)
	}
	var items []store.OutboxFinishItem
	outcomes := []store.Outcome{store.OutcomeAcked, store.OutcomeRetry, store.OutcomeFailed, store.OutcomeReleased}
	tokens := []txbox.ID{txbox.NewID(), txbox.NewID()}
	for i, ev := range evs[:40] {
		items = append(items, store.OutboxFinishItem{ID: ev.ID, LeaseToken: tokens[i%2], Outcome: outcomes[i%4], Error: "e"})
	}
	for _, deleteAcked := range []bool{false, true} {
		stmts, err := d.finishPlan(&store.OutboxFinishParams{Items: items, DeleteAcked: deleteAcked}, false)
		if err != nil {
			t.Fatal(err)
		}
		if want := map[bool]int{false: 1, true: 2}[deleteAcked]; len(stmts) != want {
			t.Fatalf("DeleteAcked=%v: %d statements, want %d", deleteAcked, len(stmts), want)
		}
		for _, st := range stmts {
			rows, err := d.DB().Query("EXPLAIN "+st.query, st.args...)
			if err != nil {
				t.Fatalf("explain %s: %v", st.query[:40], err)
			}
			cols, _ := rows.Columns()
			for rows.Next() {
				vals := make([]sql.NullString, len(cols))
				ptrs := make([]any, len(cols))
				for i := range vals {
					ptrs[i] = &vals[i]
				}
				if err := rows.Scan(ptrs...); err != nil {
					t.Fatal(err)
				}
				plan := map[string]string{}
				for i, c := range cols {
					plan[c] = vals[i].String
				}
				if plan["key"] != "PRIMARY" || plan["possible_keys"] != "PRIMARY" {
					t.Errorf("DeleteAcked=%v: %s… uses key %q of %q, want PRIMARY only", deleteAcked, st.query[:30], plan["key"], plan["possible_keys"])
				}
			}
			rows.Close()
		}
	}
}
