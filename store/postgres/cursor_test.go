package postgres_test

import (
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
	"github.com/txbox/txbox/store/postgres"
)

// A row whose transaction began before the last claimed row's but
// committed after it has a due time below the claim's lower bound. It
// must still be claimed: within the lookback at once, beyond it at the
// next full scan (which an empty claim triggers).
func TestClaimLowerBoundNeverLosesALateCommit(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name      string
		lookback  time.Duration
		wantFirst bool // claimed by the first claim after the commit
	}{
		{"within lookback", time.Minute, true},
		{"beyond lookback", time.Microsecond, false},
		{"disabled", -1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			d, err := postgres.New(newPool(t, 4), postgres.Config{Schema: newSchema(t), ClaimLookback: c.lookback, ClaimRescanInterval: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := d.Migrate(ctx); err != nil {
				t.Fatal(err)
			}
			insert := func(tx any, ev *txbox.Event) {
				t.Helper()
				if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: []*txbox.Event{ev}}); err != nil {
					t.Fatal(err)
				}
			}
			claim := func() []*store.OutboxRow {
				t.Helper()
				rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "late", Limit: 10, LeaseDuration: time.Hour})
				if err != nil {
					t.Fatal(err)
				}
				return rows
			}
			// The first claim scans in full and sets the cursor.
			first := &txbox.Event{ID: txbox.NewID(), Type: "late"}
			tx0, _ := d.Pool().Begin(ctx)
			insert(tx0, first)
			if err := tx0.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if rows := claim(); len(rows) != 1 {
				t.Fatalf("first claim: %d rows", len(rows))
			}
			lateTx, err := d.Pool().Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			late := &txbox.Event{ID: txbox.NewID(), Type: "late"}
			insert(lateTx, late) // due_at = lateTx's start
			// Make sure the next transaction starts on a later clock tick.
			var before time.Time
			if err := lateTx.QueryRow(ctx, "SELECT now()").Scan(&before); err != nil {
				t.Fatal(err)
			}
			for {
				var now time.Time
				if err := d.Pool().QueryRow(ctx, "SELECT now()").Scan(&now); err != nil {
					t.Fatal(err)
				}
				if now.After(before.Add(10 * time.Microsecond)) {
					break
				}
			}
			early := &txbox.Event{ID: txbox.NewID(), Type: "late"}
			tx2, _ := d.Pool().Begin(ctx)
			insert(tx2, early)
			if err := tx2.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			if rows := claim(); len(rows) != 1 || rows[0].ID != early.ID {
				t.Fatalf("claim before the late commit: %v", rows)
			}
			if err := lateTx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			rows := claim()
			if c.wantFirst {
				if len(rows) != 1 || rows[0].ID != late.ID {
					t.Fatalf("late row not claimed at once: got %d rows", len(rows))
				}
				return
			}
			if len(rows) != 0 {
				t.Fatalf("bounded claim found %d rows below its bound; the test does not exercise the rescan", len(rows))
			}
			if rows := claim(); len(rows) != 1 || rows[0].ID != late.ID {
				t.Fatalf("the full scan after an empty claim did not find the late row: %d rows", len(rows))
			}
		})
	}
}
