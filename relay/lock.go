package relay

import (
	"context"
	"log/slog"
	"time"

	"github.com/txbox/txbox/store"
)

// finishLocked ends a lock-claimed batch (ClaimLock) and reports it, ev,
// to the hooks. A batch in which nothing was acked, retried or failed (the
// destination was unavailable, or the relay is past its stop deadline) is
// rolled back: the rows are as they were before the claim, no attempt
// counted, and nothing is written. Otherwise the outcomes are written in
// the claim's transaction and it commits: the one write of each row.
//
// There is no group finish and no degrading as with a lease finish
// (finishCoalesced): each batch owns its transaction. A finish that fails
// leaves nothing behind: the transaction did not commit, so the rows are
// PENDING again and are delivered again (at least once, never lost).
func (p *poller) finishLocked(lb store.LockedBatch, items []store.OutboxFinishItem, ev BatchEvent) {
	defer p.deps.locks.release()
	fstart := time.Now()
	timeout := finishTimeout
	if p.deps.hard.Err() != nil {
		timeout = finishTimeoutAfterDeadline
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(p.deps.hard), timeout)
	defer cancel()
	var err error
	if onlyReleased(items) {
		err = lb.Rollback(ctx)
	} else {
		var res *store.OutboxFinishResult
		res, err = lb.Finish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: p.s.retention == 0})
		if res != nil && res.Fenced > 0 {
			ev.Fenced = res.Fenced
			p.log.Warn("lock finish skipped rows that are not the batch's", slog.Int("fenced", res.Fenced))
		}
	}
	ev.FinishDuration = time.Since(fstart)
	if err != nil {
		ev.FinishErr = err
		p.log.Error("lock finish failed; the transaction did not commit and the rows will be delivered again",
			slog.Int("rows", len(items)), slog.Any("error", err))
	}
	p.log.Debug("finished (lock claim)",
		slog.Int("sent", ev.Sent), slog.Int("retried", ev.Retried), slog.Int("failed", ev.Failed), slog.Int("released", ev.Released),
		slog.Duration("send_took", ev.SendDuration), slog.Duration("took", ev.FinishDuration))
	for _, h := range p.deps.hooks {
		h.OnBatch(ev)
	}
}

// onlyReleased reports whether every item is released: nothing to write.
func onlyReleased(items []store.OutboxFinishItem) bool {
	for _, it := range items {
		if it.Outcome != store.OutcomeReleased {
			return false
		}
	}
	return true
}
