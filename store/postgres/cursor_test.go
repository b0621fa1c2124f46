package postgres_test

import (
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
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

// TestLateCommitClaimedFirstUnderSaturation is the regression test of rows
// from a transaction that committed late waiting behind a saturated
// type's backlog: beyond the lookback they are below the claim's lower
// bound, and a full scan found one batch of them per rescan interval
// while every other claim took newer rows. Now the rescan keeps claiming
// from the oldest rows until it catches up, so once the first late row is
// claimed, the next claims take the rest of them before any newer row.
func TestLateCommitClaimedFirstUnderSaturation(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	const limit, late, backlog = 50, 300, 20_000
	d, err := postgres.New(newPool(t, 4), postgres.Config{Schema: newSchema(t), ClaimLookback: time.Microsecond, ClaimRescanInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Migrate(ctx); err != nil {
		t.Fatal(err)
	}
	events := func(n int) []*txbox.Event {
		evs := make([]*txbox.Event, n)
		for i := range evs {
			evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "sat", Payload: []byte("{}")}
		}
		return evs
	}
	// A transaction that stays open while newer rows commit behind it.
	lateTx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer lateTx.Rollback(ctx)
	lateIDs := map[txbox.ID]bool{}
	lateEvs := events(late)
	for _, ev := range lateEvs {
		lateIDs[ev.ID] = true
	}
	if err := d.OutboxInsert(ctx, lateTx, &store.OutboxInsertParams{Events: lateEvs}); err != nil {
		t.Fatal(err)
	}
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: events(backlog)}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	claim := func() (lateRows, newer int) {
		t.Helper()
		rows, err := d.OutboxClaim(ctx, &store.OutboxClaimParams{EventType: "sat", Limit: limit, LeaseDuration: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if len(rows) != limit {
			t.Fatalf("claim took %d rows: the backlog ran out, the type is not saturated", len(rows))
		}
		for _, r := range rows {
			if lateIDs[r.ID] {
				lateRows++
			}
		}
		return lateRows, len(rows) - lateRows
	}
	claim() // the first claim scans in full and sets the cursor
	claim()
	if err := lateTx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	// Claim (a saturated relay does nothing else) until the rescan finds
	// the late rows.
	got := 0
	testenv.WaitFor(t, 10*time.Second, "a claim that takes late rows", func() bool {
		n, _ := claim()
		got += n
		return n > 0
	})
	for claims := 1; got < late; claims++ {
		if claims > late/limit+1 {
			t.Fatalf("%d claims after the first late row, %d of %d late rows claimed: the rest wait behind newer rows", claims, got, late)
		}
		n, newer := claim()
		got += n
		if got < late && newer > 0 {
			t.Fatalf("claim took %d newer rows while %d older late rows were pending", newer, late-got)
		}
	}
}
