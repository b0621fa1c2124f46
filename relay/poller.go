package relay

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// probeBatchSize bounds the batch a half-open circuit lets through: a probe
// should cost little when the destination is still down.
const probeBatchSize = 10

// wakeFollowUps are the delays of the extra polls after a wake-up that
// found nothing. In-process publishers wake the relay from inside the
// transaction, before it commits (outbox.Config.OnPublish), so the first
// poll often comes too early; the commit follows within milliseconds, and
// these polls pick it up without waiting for the adaptive delay.
var wakeFollowUps = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

// pollerDeps is what a poller takes from its relay: the relay hands each
// of its pollers the same (Relay.pollerDeps), and a test can build one
// without a relay.
type pollerDeps struct {
	// store claims and finishes the rows.
	store pollerStore
	// hooks receive the poller's PollEvents and BatchEvents.
	hooks []Hook
	// log is the relay's logger; the poller adds its type and sender.
	log *slog.Logger
	// circuits hold the gate of every destination.
	circuits *circuitSet
	// run ends when Stop begins: no new claims. hard ends when Stop's
	// context expires: sends in flight abort, finishes get a short
	// bound.
	run, hard context.Context
	// wg counts the poller's goroutines; Stop waits for them.
	wg *sync.WaitGroup
	// tracer traces the deliveries; nil when tracing is off
	// (relay/trace.go).
	tracer trace.Tracer
	// locks bounds the lock-claimed batches of all pollers.
	locks *claimBudget
}

// pollerStore is the part of store.Driver a poller uses.
type pollerStore interface {
	OutboxClaim(ctx context.Context, params *store.OutboxClaimParams) ([]*store.OutboxRow, error)
	OutboxFinish(ctx context.Context, params *store.OutboxFinishParams) (*store.OutboxFinishResult, error)
}

// poller claims, sends and finishes the rows of one event type.
type poller struct {
	deps pollerDeps
	s    *settings
	// dest names the destination the type's route resolves to; circuit
	// is the gate of that destination and of the sender's connection.
	dest    string
	circuit *gate
	log     *slog.Logger
	wakeC   chan struct{}
	// againC asks for a claim at once: an ordered batch finished
	// (relay/ordered.go).
	againC chan struct{}
	// slots bounds the batches between claim and finish.
	slots chan struct{}

	// Group finish: see finishCoalesced.
	fmu       sync.Mutex
	finishing bool
	fqueue    []*finishReq

	mu       sync.Mutex
	lastPoll time.Time
	lastErr  string
	delay    time.Duration
	inFlight int
	helpers  int
	// rejectingSince is when the first batch of the current run of
	// batches that had messages refused and none acknowledged ended; zero
	// after a batch with an ack. lastRejected is when the last such batch
	// ended, lastRejection a refused message's error.
	rejectingSince, lastRejected time.Time
	lastRejection                string
	// sending holds when each send still waiting for its destination
	// began, by a number of its own (health's SendingSince).
	sending map[uint64]time.Time
	sends   uint64
	// claimErrs are the failed claims in a row: the wait after each
	// (errorBackoff).
	claimErrs backoff.Streak
}

func newPoller(deps pollerDeps, s *settings) *poller {
	dest := sender.DestinationOf(s.sender, s.route)
	return &poller{
		deps:    deps,
		s:       s,
		dest:    dest,
		circuit: deps.circuits.gate(s.senderName, dest),
		log:     deps.log.With(slog.String("event_type", s.eventType), slog.String("sender", s.senderName)),
		wakeC:   make(chan struct{}, 1),
		againC:  make(chan struct{}, 1),
		slots:   make(chan struct{}, s.inFlight),

		claimErrs: backoff.Streak{Policy: errorBackoff},
	}
}

func (p *poller) wake() {
	select {
	case p.wakeC <- struct{}{}:
	default:
	}
}

func (p *poller) health() TypeHealth {
	p.mu.Lock()
	defer p.mu.Unlock()
	return TypeHealth{
		EventType: p.s.eventType, Sender: p.s.senderName, Destination: p.dest, LastPoll: p.lastPoll,
		LastError: p.lastErr, Delay: p.delay, InFlight: p.inFlight, SendingSince: p.oldestSend(), Claim: p.s.claim,
		RejectingSince: p.rejectingSince, LastRejected: p.lastRejected, LastRejection: p.lastRejection,
	}
}

// noteRefusals records what the destination made of a finished batch,
// for TypeHealth's rejection fields: an acknowledgement ends a run of
// refusals; a batch with refused messages and none acknowledged starts or
// continues one. A batch that was only released (an outage, a stop) says
// nothing about refusals.
func (p *poller) noteRefusals(ev BatchEvent, items []store.OutboxFinishItem) {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case ev.Sent > 0:
		p.rejectingSince, p.lastRejected, p.lastRejection = time.Time{}, time.Time{}, ""
	case ev.Retried+ev.Failed > 0:
		now := time.Now()
		if p.rejectingSince.IsZero() {
			p.rejectingSince = now
		}
		p.lastRejected = now
		for _, it := range items {
			if it.Error != "" {
				p.lastRejection = it.Error
				break
			}
		}
	}
}

// oldestSend is when the oldest send in flight began. p.mu is held.
func (p *poller) oldestSend() time.Time {
	var oldest time.Time
	for _, at := range p.sending {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return oldest
}

// sendBegins records a send that begins now, until the returned func is
// called.
func (p *poller) sendBegins() (ended func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.sending == nil {
		p.sending = map[uint64]time.Time{}
	}
	p.sends++
	n := p.sends
	p.sending[n] = time.Now()
	return func() {
		p.mu.Lock()
		delete(p.sending, n)
		p.mu.Unlock()
	}
}

// run is the poller's loop: wait, take an in-flight slot, ask the circuit,
// claim, hand the batch to a goroutine, choose the next delay.
func (p *poller) run() {
	defer p.deps.wg.Done()
	ctx := p.deps.run
	pace := pacing{strategy: newPollStrategy(p.s.polling), ordered: p.s.ordering == OrderingKey}
	var delay time.Duration // no initial delay: poll at once
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	select {
	case <-p.wakeC:
		// Started by a wake-up (Relay.Wake): the first poll may come
		// before the waking publisher's commit.
		pace.woken()
	default:
	}
	for {
		if delay > 0 && !p.sleep(ctx, timer, delay, &pace) {
			return
		}
		// Take a slot: at most inFlight batches between claim and finish.
		select {
		case <-ctx.Done():
			return
		case p.slots <- struct{}{}:
		}
		t := p.circuit.allow()
		if !t.ok {
			<-p.slots
			if !p.waitCircuit(ctx, t, timer) {
				return
			}
			delay = 0
			continue
		}
		limit := p.s.batchSize
		if t.probe {
			limit = min(limit, probeBatchSize)
		}
		claimStart := time.Now()
		rows, lb, took, err := p.claim(ctx, limit)
		if err != nil {
			<-p.slots
			p.circuit.abandon(t)
			if ctx.Err() != nil {
				return
			}
			delay = p.claimFailed(err)
			p.emitPoll(PollEvent{EventType: p.s.eventType, Limit: limit, NextDelay: delay, Duration: took, Err: err}, false)
			continue
		}
		p.claimSucceeded()
		delay = pace.next(len(rows), limit)
		p.mu.Lock()
		p.delay = delay
		p.mu.Unlock()
		p.emitPoll(PollEvent{EventType: p.s.eventType, Claimed: len(rows), Limit: limit, Full: len(rows) == limit, NextDelay: delay, Duration: took}, false)
		if len(rows) == 0 {
			<-p.slots
			p.circuit.abandon(t)
			continue
		}
		p.dispatch(rows, lb, t, claimStart)
		if len(rows) == p.s.batchSize {
			p.startHelper(ctx)
		}
	}
}

// sleep waits delay, or less when the poller is woken or asked to claim
// again. It returns false when the relay stops.
func (p *poller) sleep(ctx context.Context, timer *time.Timer, delay time.Duration, pace *pacing) bool {
	timer.Reset(delay)
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-p.wakeC:
		pace.woken()
		timer.Stop() // Go ≥ 1.23: no stale tick remains after Stop
	case <-p.againC:
		pace.strategy.reset()
		timer.Stop()
	}
	return true
}

// pacing chooses the poller's wait between claims: the polling strategy,
// and the follow-up polls after a wake-up.
type pacing struct {
	strategy pollStrategy
	// ordered is true for a type delivered in key order.
	ordered   bool
	followUps []time.Duration
}

// woken starts over after a wake-up, with the follow-up polls.
func (pc *pacing) woken() {
	pc.strategy.reset()
	pc.followUps = wakeFollowUps
}

// next returns the wait after a claim that returned claimed rows of
// limit.
func (pc *pacing) next(claimed, limit int) time.Duration {
	delay := pc.strategy.next(claimed, limit)
	if pc.ordered && claimed > 0 && claimed < limit {
		// Limited by keys in flight, not idle: wait no longer than
		// min-delay, and claim at once when a batch finishes (batchDone).
		pc.strategy.reset()
		delay = pc.strategy.next(0, limit)
	}
	if claimed == 0 && len(pc.followUps) > 0 {
		delay = min(delay, pc.followUps[0])
		pc.followUps = pc.followUps[1:]
	} else if claimed > 0 {
		pc.followUps = nil
	}
	return delay
}

// claim runs one claim statement. Stop does not interrupt it (only Stop's
// deadline does): a claim cancelled mid-flight may still commit on the
// server, and its rows would then wait out their lease before anyone could
// deliver them. A claim that completes during a graceful stop is
// delivered like any other batch.
//
// No claim starts once Stop has begun: it returns errStopping instead.
// The check is here, at the one place every claimer goes through, because
// a select between the stop signal and a free slot picks either at random
// when both are ready.
//
// With the lock claim (ClaimLock) the rows come with the transaction that
// holds them, lb, which the batch's finish commits.
func (p *poller) claim(_ context.Context, limit int) (rows []*store.OutboxRow, lb store.LockedBatch, took time.Duration, err error) {
	if p.deps.run.Err() != nil {
		return nil, nil, 0, errStopping
	}
	ctx, cancel := context.WithTimeout(p.deps.hard, finishTimeout)
	defer cancel()
	start := time.Now()
	params := &store.OutboxClaimParams{
		EventType:     p.s.eventType,
		Limit:         limit,
		LeaseDuration: p.s.leaseDuration,
	}
	if p.s.ordering == OrderingKey {
		params.OrderedByKey, params.KeyRun = true, keyRun(p.s.batchSize, p.s.inFlight)
	}
	if p.s.claim == ClaimLock {
		// The batch holds its connection until its finish, which gives
		// the budget back (finishLocked); a claim that found nothing has
		// given its connection back already.
		if err := p.deps.locks.acquire(p.deps.run); err != nil {
			return nil, nil, time.Since(start), errStopping
		}
		// New checked that the store has a lock claim.
		lb, err = p.deps.store.(store.OutboxLocker).OutboxLock(ctx, params)
		if lb == nil {
			p.deps.locks.release()
			return nil, nil, time.Since(start), err
		}
		return lb.Rows(), lb, time.Since(start), err
	}
	rows, err = p.deps.store.OutboxClaim(ctx, params)
	return rows, nil, time.Since(start), err
}

// dispatch delivers a claimed batch on its own goroutine; the caller holds
// a slot, which the goroutine gives back after the finish.
func (p *poller) dispatch(rows []*store.OutboxRow, lb store.LockedBatch, t ticket, claimStart time.Time) {
	p.mu.Lock()
	p.inFlight++
	p.mu.Unlock()
	p.deps.wg.Add(1)
	go func() {
		defer p.deps.wg.Done()
		p.deliver(rows, lb, t, claimStart)
		p.mu.Lock()
		p.inFlight--
		p.mu.Unlock()
		<-p.slots
		p.batchDone()
	}()
}

// startHelper starts one more claimer while the type has a backlog, up to
// maxHelpers. A claim is a write statement whose latency, not the
// database's capacity, bounds a single claimer: with one claimer a
// backlog drains at batch-size / claim-latency however many batches may be
// in flight. Helpers claim concurrently (SKIP LOCKED hands them disjoint
// rows) and share the poller's in-flight slots, so the in-flight bound
// still holds. A helper stops at the first batch that is not full, so an
// idle type still costs one poller's queries.
func (p *poller) startHelper(ctx context.Context) {
	p.mu.Lock()
	if p.helpers >= p.maxHelpers() {
		p.mu.Unlock()
		return
	}
	p.helpers++
	helpers := p.helpers
	p.mu.Unlock()
	p.log.Debug("backlog; extra claimer started", slog.Int("helpers", helpers))
	p.deps.wg.Add(1)
	go func() {
		defer p.deps.wg.Done()
		defer func() {
			p.mu.Lock()
			p.helpers--
			p.mu.Unlock()
		}()
		for {
			select {
			case <-ctx.Done():
				return
			case p.slots <- struct{}{}:
			}
			t := p.circuit.allow()
			if !t.ok || t.probe {
				// Outages and probes are the main loop's business.
				p.circuit.abandon(t)
				<-p.slots
				return
			}
			claimStart := time.Now()
			rows, lb, took, err := p.claim(ctx, p.s.batchSize)
			if err != nil || len(rows) == 0 {
				<-p.slots
				if err != nil && ctx.Err() == nil {
					p.emitPoll(PollEvent{EventType: p.s.eventType, Limit: p.s.batchSize, Duration: took, Err: err}, true)
				}
				return
			}
			full := len(rows) == p.s.batchSize
			p.emitPoll(PollEvent{EventType: p.s.eventType, Claimed: len(rows), Limit: p.s.batchSize, Full: full, Duration: took}, true)
			p.dispatch(rows, lb, t, claimStart)
			if !full {
				return
			}
		}
	}()
}

// maxHelpers is how many extra claimers a backlog may start: half the
// in-flight batches, so each claimer keeps about two batches in flight.
func (p *poller) maxHelpers() int { return p.s.inFlight / 2 }

// waitCircuit waits until the circuit may let a claim through. It returns
// false when the relay stops.
func (p *poller) waitCircuit(ctx context.Context, t ticket, timer *time.Timer) bool {
	p.log.Debug("circuit not closed; waiting to claim", slog.String("destination", p.dest), slog.Duration("wait", t.wait))
	timer.Reset(max(t.wait, time.Millisecond))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-timer.C:
	case <-t.changed:
	}
	return true
}

func (p *poller) claimFailed(err error) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPoll = time.Now()
	p.lastErr = err.Error()
	d := p.claimErrs.Next()
	p.delay = d
	p.log.Warn("claim failed; backing off", slog.Any("error", err), slog.Duration("retry_in", d))
	return d
}

func (p *poller) claimSucceeded() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.lastPoll = time.Now()
	p.lastErr = ""
	p.claimErrs.Reset()
}

// emitPoll reports a claim to the hooks, and to the log at debug level
// (counts and durations only, never payloads). helper is true for the
// claims of a helper (startHelper), which claims again at once while its
// batches are full and never waits NextDelay.
func (p *poller) emitPoll(ev PollEvent, helper bool) {
	if p.log.Enabled(context.Background(), slog.LevelDebug) {
		attrs := []slog.Attr{slog.Int("limit", ev.Limit), slog.Int("claimed", ev.Claimed), slog.Duration("took", ev.Duration)}
		if helper {
			attrs = append(attrs, slog.Bool("helper", true))
		} else {
			attrs = append(attrs, slog.Duration("next_delay", ev.NextDelay))
		}
		if ev.Err != nil {
			attrs = append(attrs, slog.Any("error", ev.Err))
		}
		p.log.LogAttrs(context.Background(), slog.LevelDebug, "poll", attrs...)
	}
	for _, h := range p.deps.hooks {
		h.OnPoll(ev)
	}
}

// deliver sends one claimed batch and finishes it, in steps: build the
// messages, send them within the lease, let the circuits judge the
// outcome, sort each row into its finish outcome, finish and report.
// claimStart is when the claim statement was sent: the lease, taken on
// the database clock during the statement, ends no earlier than
// claimStart + lease duration on this process's monotonic clock (which
// keeps counting while the process is paused, as with SIGSTOP). lb is the
// lock claim's transaction, nil for a lease claim.
func (p *poller) deliver(rows []*store.OutboxRow, lb store.LockedBatch, t ticket, claimStart time.Time) {
	rows, invalid := p.splitInvalid(rows)
	ev := BatchEvent{EventType: p.s.eventType, Sender: p.s.senderName, Destination: p.dest}
	var items []store.OutboxFinishItem
	if len(rows) == 0 {
		p.circuit.abandon(t)
	} else {
		msgs := messages(rows, p.s.route)
		bt := p.startTrace(msgs)
		sent := p.sendWithinLease(bt, msgs, claimStart)
		bt.end(sent)
		ev.SendDuration = sent.took
		verdicts := p.judgeSent(t, msgs, sent)
		items = make([]store.OutboxFinishItem, len(rows))
		for i, row := range rows {
			items[i] = p.outcome(row, sent.results[i], verdicts[i], sent.stopped)
		}
		countOutcomes(&ev, items)
		p.logRefusals(t, sent, ev, items)
		p.noteRefusals(ev, items)
	}
	countOutcomes(&ev, invalid)
	if lb != nil {
		p.finishLocked(lb, append(items, invalid...), ev)
		return
	}
	p.finishBatch(append(items, invalid...), ev)
}

// messages turns claimed rows into the messages to send, with the
// headers every message carries (docs/concepts.md, "Headers").
func messages(rows []*store.OutboxRow, route sender.Route) []*sender.Message {
	msgs := make([]*sender.Message, len(rows))
	block := make([]sender.Message, len(rows)) // one allocation, not one per message
	for i, row := range rows {
		h := make(map[string]string, len(row.Headers)+3)
		maps.Copy(h, row.Headers)
		h[txbox.HeaderEventID] = row.ID.String()
		h[txbox.HeaderEventType] = row.EventType
		h[txbox.HeaderCreatedAt] = row.CreatedAt.UTC().Format(time.RFC3339Nano)
		block[i] = sender.Message{
			ID: row.ID, EventType: row.EventType, Key: row.Key, Payload: row.Payload,
			Headers: h, CreatedAt: row.CreatedAt, Attempt: row.Attempts + 1, Route: route,
		}
		msgs[i] = &block[i]
	}
	return msgs
}

// sendResult is what came of sending one batch.
type sendResult struct {
	// results has one entry per message, nil when it was acked.
	results []error
	// start is when Send began, took how long it ran; zero when the
	// batch was not sent.
	start time.Time
	took  time.Duration
	// stopped is true when the lease ran out before the send or the
	// relay is past its stop deadline: the outcome says nothing about
	// the destination, and every row that was not acked is released.
	stopped bool
}

// sendWithinLease sends msgs so that the send ends within the lease, with
// a margin for the finish: past it another relay may own the rows, so
// sending would only make duplicates and our finish would be fenced
// anyway. A batch whose lease is already (nearly) over, such as one
// claimed just before this process was paused, is not sent at all.
func (p *poller) sendWithinLease(bt *batchTrace, msgs []*sender.Message, claimStart time.Time) sendResult {
	deadline := claimStart.Add(p.s.leaseDuration - p.s.leaseDuration/10)
	if !time.Now().Before(deadline) {
		p.log.Warn("lease ran out before the batch was sent; releasing it unsent", slog.Int("rows", len(msgs)))
		return sendResult{results: sender.Results(errLeaseLost, len(msgs)), stopped: true}
	}
	base := p.deps.hard
	if bt != nil {
		base = bt.ctx // the batch span, for an instrumented sender
	}
	ctx, cancel := context.WithDeadline(base, deadline)
	defer cancel()
	defer p.sendBegins()()
	start := time.Now()
	var err error
	if p.s.ordering == OrderingKey {
		err = p.sendOrdered(ctx, msgs) // in waves: relay/ordered.go
	} else {
		err = p.s.sender.Send(ctx, msgs)
	}
	took := time.Since(start)
	results := sender.Results(err, len(msgs))
	stopped := p.deps.hard.Err() != nil
	if ctx.Err() != nil && !stopped {
		p.cutAtLeaseEnd(results)
	}
	return sendResult{results: results, start: start, took: took, stopped: stopped}
}

// cutAtLeaseEnd marks the transient failures of a send that the lease's
// deadline cut short as errLeaseCut: the relay's own time budget ran out,
// which says nothing about those messages, so they are released without
// an attempt and left out of the circuits' judgement. A message that
// hangs the destination is judged by the sender's own timeout, which must
// be shorter than the lease; a batch that does not fit in its lease is
// logged so the lease or batch size can be changed.
func (p *poller) cutAtLeaseEnd(results []error) {
	cut := 0
	for i, res := range results {
		if res != nil && txbox.Classify(res) == txbox.ClassTransient {
			results[i] = errLeaseCut
			cut++
		}
	}
	if cut > 0 {
		p.log.Warn("lease ran out while sending; releasing the unacknowledged rows without an attempt (raise lease or lower batch-size if this repeats)",
			slog.Int("rows", cut), slog.Int("batch", len(results)), slog.Duration("lease", p.s.leaseDuration))
	}
}

// judgeSent lets the circuits judge a sent batch, and returns one verdict
// per message: they say which transient failures are the message's own
// fault (they count an attempt); see gate.judge. A batch that was stopped
// proves nothing and is not judged: its verdicts are all zero.
func (p *poller) judgeSent(t ticket, msgs []*sender.Message, sent sendResult) []verdict {
	if sent.stopped {
		p.circuit.abandon(t)
		return make([]verdict, len(msgs))
	}
	ids := make([]txbox.ID, len(msgs))
	for i, m := range msgs {
		ids[i] = m.ID
	}
	return p.judge(t, sent.start, ids, sent.results) // unsent ordered rows left out: relay/ordered.go
}

// outcome is the finish of one sent row whose send ended with res (nil:
// acked), judged v; stopped is sendResult.stopped.
func (p *poller) outcome(row *store.OutboxRow, res error, v verdict, stopped bool) store.OutboxFinishItem {
	it := store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken}
	switch {
	case res == nil:
		it.Outcome = store.OutcomeAcked
	case stopped || (txbox.Classify(res) == txbox.ClassTransient && !v.count):
		// The destination (or this relay) is unavailable: put the row
		// back without counting an attempt.
		it.Outcome = store.OutcomeReleased
		if !stopped {
			// Wait before the row is due again. When the destination
			// failed as a whole its circuit is open as well; when only
			// some messages failed it is not, and this delay alone keeps
			// them from being hammered.
			it.RetryAfter = v.retryAfter
		}
	case txbox.Classify(res) == txbox.ClassPermanent:
		it.Outcome = store.OutcomeFailed
		it.Error = errorText(res)
	default: // rejected, or failing transiently while the destination accepts others
		it.Error = errorText(res)
		if row.Attempts+1 >= p.s.maxAttempts {
			it.Outcome = store.OutcomeFailed
		} else {
			it.Outcome = store.OutcomeRetry
			it.RetryAfter = p.s.backoff.policy().Delay(row.Attempts + 1)
		}
	}
	return it
}

// countOutcomes adds the outcomes of items to ev.
func countOutcomes(ev *BatchEvent, items []store.OutboxFinishItem) {
	for _, it := range items {
		switch it.Outcome {
		case store.OutcomeAcked:
			ev.Sent++
		case store.OutcomeRetry:
			ev.Retried++
		case store.OutcomeFailed:
			ev.Failed++
		case store.OutcomeReleased:
			ev.Released++
		}
	}
}

// logRefusals logs a failed probe and, at WARN with the event id and the
// reason, the messages the destination refused; items are the sent rows'
// outcomes, counted in ev.
func (p *poller) logRefusals(t ticket, sent sendResult, ev BatchEvent, items []store.OutboxFinishItem) {
	n := len(items)
	if t.probe && !sent.stopped && ev.Released == n {
		p.log.Warn("probe batch failed; destination still unavailable", slog.Any("error", firstError(sent.results)))
	}
	if ev.Failed == 0 && ev.Retried == 0 {
		return
	}
	// One line per message, so an operator can grep an event id, up to
	// a bound per batch: a poison flood must not turn into a log flood.
	logged := 0
	for _, it := range items {
		if it.Outcome != store.OutcomeFailed && it.Outcome != store.OutcomeRetry {
			continue
		}
		if logged == maxRefusalLines {
			break
		}
		logged++
		msg := "message rejected; will retry"
		if it.Outcome == store.OutcomeFailed {
			msg = "message failed for good; moving to the dead-letter table"
		}
		p.log.Warn(msg, slog.String("event_id", it.ID.String()), slog.String("reason", it.Error))
	}
	if n := ev.Failed + ev.Retried; n > logged {
		p.log.Warn("more messages rejected in this batch", slog.Int("not_logged", n-logged),
			slog.Int("retried", ev.Retried), slog.Int("failed", ev.Failed))
	}
}

// maxRefusalLines bounds the per-message WARN lines of one batch.
const maxRefusalLines = 10

// errStopping is what claim returns once Stop has begun.
var errStopping = errors.New("relay: stopping")

// errLeaseLost marks the rows of a batch whose lease ran out before it
// was sent.
var errLeaseLost = errors.New("relay: lease ran out before the send")

// errLeaseCut marks a message whose send the lease's deadline cut short:
// see cutAtLeaseEnd.
var errLeaseCut = txbox.Transient(errors.New("relay: send cut short at the end of the lease"))

// unjudged reports whether res is an outcome that says nothing about the
// message or its destination (errUnsent, errLeaseCut): the row is released,
// due at once, with no attempt counted.
func unjudged(res error) bool {
	return errors.Is(res, errUnsent) || errors.Is(res, errLeaseCut)
}

// maxErrorText bounds the last error stored per row.
const maxErrorText = 2000

func errorText(err error) string {
	s := err.Error()
	if len(s) > maxErrorText {
		s = strings.ToValidUTF8(s[:maxErrorText], "")
	}
	return s
}

func firstError(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return errors.New("none")
}
