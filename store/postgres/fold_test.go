package postgres_test

import (
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

func TestFinishAndClaim(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	d := open(t)
	tx, err := d.Pool().Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var evs []*txbox.Event
	for range 7 {
		evs = append(evs, &txbox.Event{ID: txbox.NewID(), Type: "fold"})
	}
	if err := d.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	claim := &store.OutboxClaimParams{EventType: "fold", Limit: 3, LeaseDuration: time.Hour}
	acked := func(rows []*store.OutboxRow) *store.OutboxFinishParams {
		p := &store.OutboxFinishParams{DeleteAcked: true}
		for _, r := range rows {
			p.Items = append(p.Items, store.OutboxFinishItem{ID: r.ID, LeaseToken: r.LeaseToken, Outcome: store.OutcomeAcked})
		}
		return p
	}

	// Nothing to finish: a plain claim.
	res, first, err := d.OutboxFinishAndClaim(ctx, &store.OutboxFinishParams{}, claim)
	if err != nil || res.Finished != 0 || len(first) != 3 {
		t.Fatalf("empty finish + claim: %+v, %d rows, %v", res, len(first), err)
	}
	// Finish the first batch, claim the second, in one round trip.
	res, second, err := d.OutboxFinishAndClaim(ctx, acked(first), claim)
	if err != nil || res.Finished != 3 || res.Fenced != 0 || len(second) != 3 {
		t.Fatalf("finish + claim: %+v, %d rows, %v", res, len(second), err)
	}
	for _, r := range second {
		for _, f := range first {
			if r.ID == f.ID {
				t.Fatalf("row %s claimed twice", r.ID)
			}
		}
	}
	// A stale finish is fenced and the claim still happens.
	stale := acked(first)
	res, third, err := d.OutboxFinishAndClaim(ctx, stale, claim)
	if err != nil || res.Finished != 0 || res.Fenced != 3 || len(third) != 1 {
		t.Fatalf("stale finish + claim: %+v, %d rows, %v", res, len(third), err)
	}
	// Bad claim parameters: nothing is applied, not even the finish.
	bad := *claim
	bad.Limit = 0
	if _, _, err := d.OutboxFinishAndClaim(ctx, acked(second), &bad); !errors.Is(err, store.ErrInvalidParams) {
		t.Fatalf("bad claim: %v, want ErrInvalidParams", err)
	}
	if s, _ := d.OutboxStats(ctx); len(s) != 1 || s[0].InProcess != 4 {
		t.Fatalf("stats after a refused call = %+v, want 4 in process", s[0])
	}
	// The finish and the claim commit together: the second batch is gone.
	res, rest, err := d.OutboxFinishAndClaim(ctx, acked(append(second, third...)), claim)
	if err != nil || res.Finished != 4 || len(rest) != 0 {
		t.Fatalf("final finish + claim: %+v, %d rows, %v", res, len(rest), err)
	}
	if s, _ := d.OutboxStats(ctx); len(s) != 0 {
		t.Fatalf("rows left: %+v", s[0])
	}
}
