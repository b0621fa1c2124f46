package relay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// leaseBatch is a batch of the lease claim (txbox.ClaimLease): its rows are
// IN_PROCESS under a lease token, and their finish is a second write,
// folded with the finishes of the type's other batches (finishCoalesced)
// and degrading when a value is refused (finishDegrading).
type leaseBatch struct {
	p    *poller
	rows []*store.OutboxRow
}

// leaseClaim is the claimFunc of the lease claim.
func (p *poller) leaseClaim(ctx context.Context, params *store.OutboxClaimParams) (batch, error) {
	rows, err := p.deps.store.OutboxClaim(ctx, params)
	if err != nil || len(rows) == 0 {
		return nil, err
	}
	return &leaseBatch{p: p, rows: rows}, nil
}

func (b *leaseBatch) Rows() []*store.OutboxRow { return b.rows }

// Scope never ends: the lease bounds the send (sendWithinLease).
func (b *leaseBatch) Scope() context.Context { return context.Background() }

// Finish records the batch's outcomes in a group finish.
func (b *leaseBatch) Finish(items []store.OutboxFinishItem) finishReport {
	start := time.Now()
	res, err := b.p.finishCoalesced(items)
	fr := finishReport{
		took: time.Since(start), err: err,
		fencedWhy: "lease lost before finish; another relay owns these rows now",
		failedWhy: "finish failed; rows will be recovered after their lease expires",
	}
	if res != nil {
		fr.fenced = res.Fenced
	}
	return fr
}

// finishReq is one batch's finish waiting in a group finish.
type finishReq struct {
	items []store.OutboxFinishItem
	done  chan finishOutcome
}

type finishOutcome struct {
	res *store.OutboxFinishResult
	err error
	// lead hands the waiting batch the leadership of the next group.
	lead bool
}

// finishCoalesced records one batch's outcome, folding it with the
// outcomes of other batches of this type that completed meanwhile (group
// commit): when no finish is running, the caller becomes the leader and
// finishes everything queued in one statement (one transaction, one WAL
// flush); batches completing meanwhile queue up, and when the leader is
// done it hands leadership to the first of them, which finishes the whole
// queue in turn. A leader finishes exactly one group, so no batch waits
// for more than the statement running when it arrived plus its own.
func (p *poller) finishCoalesced(items []store.OutboxFinishItem) (*store.OutboxFinishResult, error) {
	req := &finishReq{items: items, done: make(chan finishOutcome, 1)}
	p.fmu.Lock()
	p.fqueue = append(p.fqueue, req)
	if p.finishing {
		p.fmu.Unlock()
		o := <-req.done
		if !o.lead {
			return o.res, o.err
		}
		p.fmu.Lock() // leadership handed over; finishing stays true
	} else {
		p.finishing = true
	}
	group := p.fqueue
	p.fqueue = nil
	p.fmu.Unlock()

	all := group[0].items
	if len(group) > 1 {
		all = make([]store.OutboxFinishItem, 0, len(group)*len(items))
		for _, g := range group {
			all = append(all, g.items...)
		}
	}
	parts := p.finishDegrading(all)
	var own finishOutcome
	lo := 0
	for _, g := range group {
		hi := lo + len(g.items)
		o := attribute(parts, lo, hi)
		lo = hi
		if g == req {
			own = o
			continue
		}
		g.done <- o
	}

	p.fmu.Lock()
	if len(p.fqueue) > 0 {
		next := p.fqueue[0]
		p.fmu.Unlock()
		next.done <- finishOutcome{lead: true}
	} else {
		p.finishing = false
		p.fmu.Unlock()
	}
	return own.res, own.err
}

// finishPart is the result of one finish call over items [lo, hi) of a
// group.
type finishPart struct {
	lo, hi int
	res    *store.OutboxFinishResult // nil when err is set
	err    error
	// fenced is what is left of res.Fenced to attribute to batches.
	fenced int
}

// attribute returns the outcome of the batch whose items are [lo, hi) of
// the group. The statements report totals, so a part's fenced rows are
// attributed to its batches in order. A batch with items in a part that
// failed gets an error saying how many of its rows were not finished (they
// stay claimed until their lease expires and are then recovered), and the
// result of the rest.
func attribute(parts []*finishPart, lo, hi int) finishOutcome {
	res := &store.OutboxFinishResult{}
	var failed int
	var err error
	for _, pt := range parts {
		n := min(hi, pt.hi) - max(lo, pt.lo)
		if n <= 0 {
			continue
		}
		if pt.err != nil {
			failed += n
			if err == nil {
				err = pt.err
			}
			continue
		}
		f := min(pt.fenced, n)
		pt.fenced -= f
		res.Fenced += f
		res.Finished += n - f
	}
	switch {
	case failed == 0:
		return finishOutcome{res: res}
	case failed == hi-lo:
		return finishOutcome{err: err}
	default:
		return finishOutcome{res: res, err: fmt.Errorf("%d of %d rows not finished: %w", failed, hi-lo, err)}
	}
}

// finishDegrading finishes items and, when that fails, degrades instead of
// giving the whole group up: it finishes each half on its own, splitting a
// half that fails again, down to single items. One value the database
// refuses (a text it cannot store, say) then fails only its own row, and
// every other row of the group, acked ones above all, is finished instead
// of being delivered again after its lease. The parts that still fail are
// then retried a few times with backoff, as a whole group used to be: a
// finish is fenced by the lease token, so repeating it is harmless, and a
// row left IN_PROCESS would be delivered again after its lease expires.
//
// A failure that is a timeout or a cancellation (the database is not
// answering, or the relay is past its stop deadline) is not split: every
// part would only wait as long again.
func (p *poller) finishDegrading(items []store.OutboxFinishItem) []*finishPart {
	res, err := p.finishOnce(items)
	if err == nil {
		return []*finishPart{{lo: 0, hi: len(items), res: res, fenced: res.Fenced}}
	}
	parts := p.finishSplit(items, 0, err)
	if !anyFinished(parts) {
		// Not one part went through: the database itself is failing, not
		// a value. Retry the group as one, not part by part.
		parts = []*finishPart{{lo: 0, hi: len(items), err: parts[0].err}}
	}
	for retry := 1; retry <= finishRetries; retry++ {
		failing := false
		for _, pt := range parts {
			failing = failing || pt.err != nil
		}
		if !failing || p.deps.hard.Err() != nil {
			break
		}
		t := time.NewTimer(finishRetry.Delay(retry))
		select {
		case <-t.C:
		case <-p.deps.hard.Done():
		}
		t.Stop()
		for _, pt := range parts {
			if pt.err == nil {
				continue
			}
			if res, err := p.finishOnce(items[pt.lo:pt.hi]); err == nil {
				pt.res, pt.err, pt.fenced = res, nil, res.Fenced
			} else {
				pt.err = err
			}
		}
	}
	return parts
}

func anyFinished(parts []*finishPart) bool {
	for _, pt := range parts {
		if pt.err == nil {
			return true
		}
	}
	return false
}

// finishRetries is how many times finishDegrading retries the parts that
// still fail, waiting finishRetry before each: 50ms, 200ms and 800ms.
const finishRetries = 3

var finishRetry = backoff.Policy{Initial: 50 * time.Millisecond, Multiplier: 4, Max: 800 * time.Millisecond}

// finishSplit handles items (at offset off in the group), whose finish as
// a whole failed with err: it finishes each half once, splitting a half
// that fails again.
func (p *poller) finishSplit(items []store.OutboxFinishItem, off int, err error) []*finishPart {
	if len(items) == 1 || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled) || p.deps.hard.Err() != nil {
		return []*finishPart{{lo: off, hi: off + len(items), err: err}}
	}
	mid := len(items) / 2
	var out []*finishPart
	for _, h := range [][2]int{{0, mid}, {mid, len(items)}} {
		sub := items[h[0]:h[1]]
		res, err := p.finishOnce(sub)
		if err != nil {
			out = append(out, p.finishSplit(sub, off+h[0], err)...)
			continue
		}
		out = append(out, &finishPart{lo: off + h[0], hi: off + h[1], res: res, fenced: res.Fenced})
	}
	return out
}

// finishOnce is one finish call, bounded by finishTimeout (by
// finishTimeoutAfterDeadline once the relay is past its stop deadline).
func (p *poller) finishOnce(items []store.OutboxFinishItem) (*store.OutboxFinishResult, error) {
	ctx, cancel := p.lane.finishContext()
	defer cancel()
	return p.deps.store.OutboxFinish(ctx, &store.OutboxFinishParams{Items: items, DeleteAcked: p.s.retention == 0})
}
