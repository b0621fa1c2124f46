package relay

import (
	"context"
	"time"

	"github.com/txbox/txbox/store"
)

// lockBatch is a batch of the lock claim (txbox.ClaimLock): its rows are locked
// in a transaction held open while they are sent, on a connection taken
// from the lock claims' budget (claimBudget).
type lockBatch struct {
	p  *poller
	lb store.LockedBatch
	// writeReleased makes Finish write released rows (their due time)
	// rather than roll back a batch that only released rows: the shared
	// claim splits those rows next (relay/fanout_shared.go), and a
	// rollback would leave them due at once, for another claim to take
	// and send to every route again before the split.
	writeReleased bool
}

// keepReleasedDue asks Finish to write the released rows' due time
// (writeReleased).
func (b *lockBatch) keepReleasedDue() { b.writeReleased = true }

// lockClaim returns the claimFunc of the lock claim on locker. The batch
// holds its connection until its finish, which gives the budget back; a
// claim that found nothing has given its connection back already.
func (p *poller) lockClaim(locker store.OutboxLocker) claimFunc {
	return func(ctx context.Context, params *store.OutboxClaimParams) (batch, error) {
		if err := p.deps.locks.acquire(p.deps.run); err != nil {
			return nil, errStopping
		}
		lb, err := locker.OutboxLock(ctx, params)
		if lb == nil {
			p.deps.locks.release()
			return nil, err
		}
		return &lockBatch{p: p, lb: lb}, nil
	}
}

func (b *lockBatch) Rows() []*store.OutboxRow { return b.lb.Rows() }

// Scope never ends: the lease bounds the send (sendWithinLease).
func (b *lockBatch) Scope() context.Context { return context.Background() }

// Finish ends the batch. A batch in which nothing was acked, retried or
// failed (the destination was unavailable, or the relay is past its stop
// deadline) is released: the transaction rolls back, the rows are as they
// were before the claim, no attempt counted, and nothing is written.
// Otherwise the outcomes are written in the claim's transaction and it
// commits: the one write of each row.
//
// There is no group finish and no degrading as with a lease finish
// (finishCoalesced): each batch owns its transaction. A finish that fails
// leaves nothing behind: the transaction did not commit, so the rows are
// PENDING again and are delivered again (at least once, never lost).
func (b *lockBatch) Finish(items []store.OutboxFinishItem) finishReport {
	defer b.p.deps.locks.release()
	start := time.Now()
	ctx, cancel := b.p.lane.finishContext()
	defer cancel()
	fr := finishReport{
		fencedWhy: "lock finish skipped rows that are not the batch's",
		failedWhy: "lock finish failed; the transaction did not commit and the rows will be delivered again",
	}
	if onlyReleased(items) && !b.writeReleased {
		fr.err = b.release(ctx)
	} else {
		var res *store.OutboxFinishResult
		res, fr.err = b.lb.Finish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: b.p.s.retention == 0})
		if res != nil {
			fr.fenced = res.Fenced
		}
	}
	fr.took = time.Since(start)
	return fr
}

// release gives the rows back as they were: the transaction rolls back.
func (b *lockBatch) release(ctx context.Context) error { return b.lb.Rollback(ctx) }

// onlyReleased reports whether every item is released: nothing to write.
func onlyReleased(items []store.OutboxFinishItem) bool {
	for _, it := range items {
		if it.Outcome != store.OutcomeReleased {
			return false
		}
	}
	return true
}
