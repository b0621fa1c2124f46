package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// The shared claim of a fanned-out type (docs/concepts.md, "Fan-out"):
// while its routes are healthy, an event's one row is claimed once, sent
// to every route in parallel and deleted when every route acknowledged it
// (one claim and one finish per event, as for a type with one route). A
// route that did not acknowledge it (down, refusing, its circuit open,
// cut off for slowness, or the relay stopping) gets a row of its own: the
// row is released and split (store.Expander.OutboxSplit), and that
// route's poller delivers its row, with its retries, back-off and dead
// letters, as when the expander makes the rows. The routes that
// acknowledged get nothing more.

const (
	// splitGrace is how long a released row waits before it is due again,
	// so that no other claim takes it (and sends it to every route again)
	// between its release and its split a moment later.
	splitGrace = 2 * time.Second
	// A route whose send in a shared batch took longer than fanSlowFloor
	// and fanSlowFactor times the fastest route's is cut off from the
	// shared claim for fanDetachFor: its events get rows of their own
	// meanwhile, which its poller delivers at its own pace, so a slow
	// destination delays the others by one batch per fanDetachFor at most.
	fanSlowFloor  = time.Second
	fanSlowFactor = 4
	fanDetachFor  = 30 * time.Second
)

// sharedEligible reports whether a fanned-out type with these routes
// takes the shared claim: not when a route is delivered in key order (a
// route's rows would then have to wait for the shared claim's, and the
// shared claim for every route's), nor in WAL mode, whose stream fans out
// itself.
func sharedEligible(routes []*typeSettings, stream bool) bool {
	if stream {
		return false
	}
	for _, s := range routes {
		if s.ordered() {
			return false
		}
	}
	return true
}

// sharedSettings are the settings of the shared claim of a type whose
// type-level settings are typ and whose routes are routes: typ's batch,
// polling, lease and in-flight bounds, unordered, claimed by lock only
// when every route is, and sending through routes[0]'s sender only in
// name (its lane's log and destination; its sends go to every route).
func sharedSettings(typ *typeSettings, routes []*typeSettings) *typeSettings {
	s := *typ
	s.routeName, s.ordering = "", txbox.OrderingNone
	s.senderName, s.sender, s.route = routes[0].senderName, routes[0].sender, routes[0].route
	s.claim = txbox.ClaimLock
	for _, r := range routes {
		if r.claim != txbox.ClaimLock {
			s.claim = txbox.ClaimLease
		}
	}
	return &s
}

// sharedFan sends the shared claim's batches to every route.
type sharedFan struct {
	eventType  string
	routeNames []string
	// routes are the route pollers, by route index: their lanes send,
	// judge and report; they deliver the rows a split makes.
	routes   []*poller
	splitter store.Expander
	hooks    []txbox.RelayHook
	log      *slog.Logger

	mu            sync.Mutex
	detachedUntil []time.Time
	lastErr       string
}

// routeSend is what came of one route's send of a shared batch.
type routeSend struct {
	// attached is false when the route was not sent to: its circuit was
	// not closed, or it was cut off for slowness.
	attached bool
	items    []store.OutboxFinishItem
	ev       txbox.BatchEvent
	took     time.Duration
	stopped  bool
}

// deliver is the shared lane's delivery (lane.deliverFn): send to every
// attached route, finish the rows every route acknowledged, release and
// split the others.
func (f *sharedFan) deliver(l *lane, b batch, t ticket, claimStart time.Time) {
	l.circuit.abandon(t) // the shared lane's own circuit is never judged
	rows, invalid := l.splitInvalid(b.Rows())
	var sends []routeSend
	var items []store.OutboxFinishItem
	var splits []store.SplitRow
	if len(rows) > 0 {
		sends = f.sendAll(rows, claimStart, b.Scope())
		items, splits = f.combine(rows, sends)
	}
	items = append(items, invalid...)
	if kd, ok := b.(interface{ keepReleasedDue() }); ok && len(splits) > 0 {
		// A lock batch must not roll back the rows it is about to
		// split: see lockBatch.writeReleased.
		kd.keepReleasedDue()
	}
	fr := b.Finish(items)
	first := true
	for i, s := range sends {
		if !s.attached {
			continue
		}
		rfr := fr
		if !first {
			rfr = finishReport{took: fr.took} // the finish's trouble is reported once
		}
		first = false
		f.routes[i].lane.report(s.ev, len(rows), rfr)
	}
	if len(invalid) > 0 || (first && (fr.err != nil || fr.fenced > 0)) {
		ev := txbox.BatchEvent{EventType: l.s.eventType, Sender: l.s.senderName, Claim: l.s.claim}
		countOutcomes(&ev, invalid)
		l.report(ev, len(invalid), fr)
	}
	if fr.err == nil && len(splits) > 0 {
		f.split(l, splits)
	}
}

// sendAll sends rows to every attached route at once and waits for all.
func (f *sharedFan) sendAll(rows []*store.OutboxRow, claimStart time.Time, scope context.Context) []routeSend {
	sends := make([]routeSend, len(f.routes))
	var wg sync.WaitGroup
	now := time.Now()
	f.mu.Lock()
	detached := make([]bool, len(f.routes))
	for i, until := range f.detachedUntil {
		detached[i] = now.Before(until)
	}
	f.mu.Unlock()
	// The routes' messages share one headers map per event unless
	// tracing, which writes each message's traceparent, is on.
	var base []*sender.Message
	if f.routes[0].lane.deps.tracer == nil {
		base = messages(rows, sender.Route{}, f.routes[0].lane.deps.tenant)
	}
	for i, p := range f.routes {
		if detached[i] {
			continue
		}
		wg.Go(func() { sends[i] = sendRoute(p.lane, i, rows, base, claimStart, scope) })
	}
	wg.Wait()
	f.cutSlow(sends)
	return sends
}

// sendRoute sends a shared batch's rows to the route at index i, whose
// lane is rl, as its own batch would be sent: its circuit asked, its
// messages with the route's delivery ids, its trace, its judgement.
func sendRoute(rl *lane, i int, rows []*store.OutboxRow, base []*sender.Message, claimStart time.Time, scope context.Context) routeSend {
	rt := rl.circuit.allow()
	if !rt.ok {
		return routeSend{}
	}
	if rt.probe {
		// A half-open circuit is probed by the route's poller, with a
		// small batch of its own rows, not with a shared batch.
		rl.circuit.abandon(rt)
		return routeSend{}
	}
	msgs := routeMessages(base, rows, rl.s.route, i, rl.deps.tenant)
	bt := rl.startTrace(msgs)
	sent := rl.sendWithinLease(bt, msgs, claimStart, scope)
	bt.end(sent)
	verdicts := rl.judgeSent(rt, msgs, sent)
	items := make([]store.OutboxFinishItem, len(rows))
	for j, row := range rows {
		items[j] = rl.outcome(row, sent.results[j], sent.classes[j], verdicts[j], sent.stopped)
	}
	ev := txbox.BatchEvent{EventType: rl.s.eventType, Route: rl.s.routeName, Sender: rl.s.senderName, Destination: rl.dest, Claim: rl.s.claim, SendDuration: sent.took}
	countOutcomes(&ev, items)
	rl.logRefusals(rt, sent, ev, items)
	rl.noteRefusals(ev, items)
	return routeSend{attached: true, items: items, ev: ev, took: sent.took, stopped: sent.stopped}
}

// routeMessages are the messages of rows for the route at index i, with
// the route's destination and delivery ids: copies of base that share its
// headers (senders only read them), or, when base is nil, built anew.
func routeMessages(base []*sender.Message, rows []*store.OutboxRow, route sender.Route, i int, tenant string) []*sender.Message {
	if base == nil {
		msgs := messages(rows, route, tenant)
		for j, m := range msgs {
			m.DeliveryID = store.RouteRowID(rows[j].ID, i)
		}
		return msgs
	}
	block := make([]sender.Message, len(base)) // one allocation, as in messages
	msgs := make([]*sender.Message, len(base))
	for j, m := range base {
		block[j] = *m
		block[j].Route, block[j].DeliveryID = route, store.RouteRowID(rows[j].ID, i)
		msgs[j] = &block[j]
	}
	return msgs
}

// cutSlow cuts off from the shared claim, for fanDetachFor, each route
// whose send took far longer than the fastest route's.
func (f *sharedFan) cutSlow(sends []routeSend) {
	var fastest time.Duration
	n := 0
	for _, s := range sends {
		if s.attached && !s.stopped {
			if n == 0 || s.took < fastest {
				fastest = s.took
			}
			n++
		}
	}
	if n < 2 {
		return
	}
	now := time.Now()
	for i, s := range sends {
		if !s.attached || s.stopped || s.took <= fanSlowFloor || s.took <= fanSlowFactor*fastest {
			continue
		}
		f.mu.Lock()
		f.detachedUntil[i] = now.Add(fanDetachFor)
		f.mu.Unlock()
		f.log.Warn("route is slow; its events get rows of their own, which its poller delivers, so it does not delay the other routes",
			slog.String("route", f.routeNames[i]), slog.Duration("send_took", s.took), slog.Duration("fastest_route_took", fastest), slog.Duration("for", fanDetachFor))
	}
}

// combine turns the routes' outcomes of each row into the row's finish:
// acked when every route acked it; else released (due after splitGrace,
// or the routes' longest retry delay) and split to the routes that did
// not, unless no route acked it because the send was stopped (the relay
// is stopping, or the lease ran out): then it is released whole, to be
// claimed and sent to every route again.
func (f *sharedFan) combine(rows []*store.OutboxRow, sends []routeSend) ([]store.OutboxFinishItem, []store.SplitRow) {
	items := make([]store.OutboxFinishItem, len(rows))
	var splits []store.SplitRow
	all := uint32(1)<<uint(len(sends)) - 1
	for j, row := range rows {
		var done uint32
		var retryAfter time.Duration
		stopped := false
		for i, s := range sends {
			if !s.attached {
				continue
			}
			it := s.items[j]
			if it.Outcome == store.OutcomeAcked {
				done |= 1 << uint(i)
				continue
			}
			retryAfter = max(retryAfter, it.RetryAfter)
			stopped = stopped || s.stopped
		}
		items[j] = store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken, Outcome: store.OutcomeAcked}
		if done == all {
			continue
		}
		items[j].Outcome = store.OutcomeReleased
		if stopped && done == 0 {
			continue
		}
		items[j].RetryAfter = max(retryAfter, splitGrace)
		splits = append(splits, store.SplitRow{ID: row.ID, Done: done})
	}
	return items, splits
}

// split gives the routes that did not acknowledge the released rows rows
// of their own, and wakes those routes' pollers. A split that fails
// leaves the rows as they are (route "", due after splitGrace): they are
// claimed and sent to every route again, a duplicate for the routes that
// had acknowledged them, never a loss.
func (f *sharedFan) split(l *lane, splits []store.SplitRow) {
	var need uint32
	total := 0
	var firstErr error
	for len(splits) > 0 {
		chunk := splits[:min(len(splits), store.MaxSplitRows)]
		splits = splits[len(chunk):]
		for _, s := range chunk {
			need |= ^s.Done
		}
		ctx, cancel := l.finishContext()
		n, err := f.splitter.OutboxSplit(ctx, &store.OutboxSplitParams{EventType: f.eventType, Routes: f.routeNames, Rows: chunk, Retain: l.s.retention > 0})
		cancel()
		total += n
		if err != nil && firstErr == nil {
			firstErr = err
			f.log.Warn("splitting a shared batch's unacknowledged events failed; they will be sent to every route again",
				slog.Int("rows", len(chunk)), slog.Any("error", err))
		}
	}
	f.mu.Lock()
	f.lastErr = ""
	if firstErr != nil {
		f.lastErr = firstErr.Error()
	}
	f.mu.Unlock()
	for _, h := range f.hooks {
		h.OnMaintenance(txbox.MaintenanceEvent{Job: txbox.JobExpand, Count: total, Err: firstErr})
	}
	for i, p := range f.routes {
		if need&(1<<uint(i)) != 0 {
			p.wake()
		}
	}
}
