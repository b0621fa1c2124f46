package mysql

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/store"
)

// TestSplitSkipsLockedRows: OutboxSplit skips a row another transaction
// holds instead of waiting for it (SKIP LOCKED), splits the others, and
// splits the held one once it is free.
func TestSplitSkipsLockedRows(t *testing.T) {
	t.Parallel()
	d := setup(t)
	evs := publish(t, d, events("fan", 2)...)
	a, b := evs[0], evs[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := d.DB().BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var held string
	if err := tx.QueryRowContext(ctx, "SELECT id FROM "+d.qOutbox+" WHERE id = ? FOR UPDATE", a.ID.String()).Scan(&held); err != nil {
		t.Fatal(err)
	}
	routes := []string{"kafka", "hook"}
	rows := []store.SplitRow{{ID: a.ID}, {ID: b.ID}}
	start := time.Now()
	n, err := d.OutboxSplit(ctx, &store.OutboxSplitParams{EventType: "fan", Routes: routes, Rows: rows})
	if err != nil || n != 1 {
		t.Fatalf("split beside a held row: %d, %v; want 1 (b)", n, err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Fatalf("split waited %s for the held row", waited)
	}
	if status, _ := statusOf(t, d, store.RouteRowID(a.ID, 1)); status != "" {
		t.Fatalf("the held row was split: its copy is %s", status)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	n, err = d.OutboxSplit(ctx, &store.OutboxSplitParams{EventType: "fan", Routes: routes, Rows: rows})
	if err != nil || n != 1 {
		t.Fatalf("split once free: %d, %v; want 1 (a)", n, err)
	}
	for _, ev := range evs {
		if status, _ := statusOf(t, d, store.RouteRowID(ev.ID, 1)); status != "PENDING" {
			t.Fatalf("copy of %s: status %q, want PENDING", ev.ID, status)
		}
	}
}
