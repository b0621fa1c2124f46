package relay

import (
	"context"
	"time"

	"github.com/txbox/txbox/store"
)

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
	res, err := p.finish(all)
	// The statement reports totals: fenced rows are attributed to the
	// batches in order.
	fenced := 0
	if res != nil {
		fenced = res.Fenced
	}
	var own finishOutcome
	for _, g := range group {
		o := finishOutcome{err: err}
		if err == nil {
			f := min(fenced, len(g.items))
			fenced -= f
			o.res = &store.OutboxFinishResult{Finished: len(g.items) - f, Fenced: f}
		}
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

// finish records the batch's outcome, retrying a few times on error: a
// finish is fenced by the lease token, so repeating it is harmless, and a
// row left IN_PROCESS would be delivered again after its lease expires.
func (p *poller) finish(items []store.OutboxFinishItem) (*store.OutboxFinishResult, error) {
	params := &store.OutboxFinishParams{Items: items, DeleteAcked: p.s.retention == 0}
	var lastErr error
	backoff := 50 * time.Millisecond
	const attempts = 4
	for attempt := 0; attempt < attempts; attempt++ {
		timeout := finishTimeout
		if p.r.hardCtx.Err() != nil {
			timeout = finishTimeoutAfterDeadline
			if attempt > 0 {
				break
			}
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(p.r.hardCtx), timeout)
		res, err := p.r.cfg.Store.OutboxFinish(ctx, params)
		cancel()
		if err == nil {
			return res, nil
		}
		lastErr = err
		if attempt == attempts-1 {
			break
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-p.r.hardCtx.Done():
		}
		t.Stop()
		backoff *= 4
	}
	return nil, lastErr
}
