package relay

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/sender"
	"github.com/txbox/txbox/store"
)

// A lane delivers the batches of one event type, whatever took them: the
// table source's claims (poller, relay/poller.go) or the WAL source's
// stream (streamLane, relay/stream_lane.go). It owns the type's in-flight
// slots, its circuit, the send (in waves on an ordered type), the judging
// of the outcome, the trace and the report; a batch (relay/batch.go)
// carries the rows and the way their outcomes are finished. A source asks
// the lane for a slot and the circuit, takes a batch its own way and hands
// it to dispatch: nothing in the lane asks which source took it.

// laneDeps is what a lane takes from its relay (Relay.laneDeps); a test
// can build one without a relay.
type laneDeps struct {
	// hooks receive the lane's BatchEvents.
	hooks []txbox.RelayHook
	// log is the relay's logger; the lane adds its type and sender.
	log *slog.Logger
	// circuits hold the circuit of every destination.
	circuits *circuitSet
	// hard ends when Stop's context expires: sends in flight abort,
	// finishes get a short bound.
	hard context.Context
	// life runs the lane's deliveries; Stop waits for them.
	life *startstop.Lifetime
	// tracer traces the deliveries; nil when tracing is off
	// (relay/trace.go).
	tracer trace.Tracer
	// tenant is Config.Tenant: each message's txbox-tenant header.
	tenant string
}

// lane is the delivery of one event type's batches.
type lane struct {
	deps laneDeps
	s    *typeSettings
	// dest names the destination the type's route resolves to; circuit
	// is the circuit pair of that destination and of the sender's
	// connection.
	dest    string
	circuit *circuitPair
	log     *slog.Logger
	// send sends one batch's messages: the sender's Send, or in waves on
	// an ordered type (sendOrdered); chosen once, in newLane.
	send func(ctx context.Context, msgs []*sender.Message) error
	// slots bounds the batches between their taking and their finish:
	// a source takes a slot before it takes a batch.
	slots chan struct{}
	// finished, when set, runs after each batch's finish: the table
	// source's ordered claim asks to claim again at once (batchDone).
	finished func()
	// deliverFn, when set, delivers each batch instead of deliver: the
	// shared claim of a fanned-out type sends to every route
	// (relay/fanout_shared.go).
	deliverFn func(b batch, t ticket, taken time.Time)

	mu       sync.Mutex
	inFlight int
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
}

func newLane(deps laneDeps, s *typeSettings) *lane {
	dest := sender.DestinationOf(s.sender, s.route)
	l := &lane{
		deps:    deps,
		s:       s,
		dest:    dest,
		circuit: deps.circuits.circuitPair(s.senderName, dest),
		log:     laneLogger(deps.log, s),
		send:    s.sender.Send,
		slots:   make(chan struct{}, s.inFlight),
	}
	if s.ordered() {
		l.send = l.sendOrdered // in waves: relay/ordered.go
	}
	return l
}

// laneLogger names the lane's type, route (when it has one) and sender in
// its log lines.
func laneLogger(log *slog.Logger, s *typeSettings) *slog.Logger {
	if s.routeName != "" {
		return log.With(slog.String("event_type", s.eventType), slog.String("route", s.routeName), slog.String("sender", s.senderName))
	}
	return log.With(slog.String("event_type", s.eventType), slog.String("sender", s.senderName))
}

// health is the lane's part of its type's health; the source adds its
// own (a poller its last poll and delay).
func (l *lane) health() TypeHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return TypeHealth{
		EventType: l.s.eventType, Route: l.s.routeName, Sender: l.s.senderName, Destination: l.dest, Claim: l.s.claim,
		InFlight: l.inFlight, SendingSince: l.oldestSend(),
		RejectingSince: l.rejectingSince, LastRejected: l.lastRejected, LastRejection: l.lastRejection,
	}
}

// oldestSend is when the oldest send in flight began. l.mu is held.
func (l *lane) oldestSend() time.Time {
	var oldest time.Time
	for _, at := range l.sending {
		if oldest.IsZero() || at.Before(oldest) {
			oldest = at
		}
	}
	return oldest
}

// acquire takes what a source needs before it takes a batch for this
// lane: a slot of the in-flight bound, then the circuit's ticket. It
// returns false when ctx ends first. A ticket that is not ok (a circuit is
// open, or its probe is out) comes back with its slot already given back:
// the source waits t.wait (or t.changed), or sends its events elsewhere.
// An ok ticket holds a slot, which the source hands to dispatch with a
// batch, or gives back with release when it took none.
func (l *lane) acquire(ctx context.Context) (ticket, bool) {
	select {
	case <-ctx.Done():
		return ticket{}, false
	case l.slots <- struct{}{}:
	}
	t := l.circuit.allow()
	if !t.ok {
		<-l.slots
	}
	return t, true
}

// release gives back an ok ticket and its slot unused: the source took no
// batch on them (nothing to take, or the take failed).
func (l *lane) release(t ticket) {
	l.circuit.abandon(t)
	<-l.slots
}

// batchLimit is how many events a batch taken on t may hold: the batch
// size, or fewer when t probes a half-open circuit.
func (l *lane) batchLimit(t ticket) int {
	if t.probe {
		return min(l.s.batchSize, probeBatchSize)
	}
	return l.s.batchSize
}

// dispatch delivers a batch on its own goroutine; the caller holds a slot
// and the circuit's ticket t (acquire), which the goroutine gives back
// after the finish. taken is when the batch was taken: a claimed batch's lease
// counts from it (deliver).
func (l *lane) dispatch(b batch, t ticket, taken time.Time) {
	l.mu.Lock()
	l.inFlight++
	l.mu.Unlock()
	deliver := l.deliver
	if l.deliverFn != nil {
		deliver = l.deliverFn
	}
	l.deps.life.Go(func() {
		deliver(b, t, taken)
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
		<-l.slots
		if l.finished != nil {
			l.finished()
		}
	})
}

// The delivery of one claimed batch, whatever claimed it (a batch:
// relay/batch.go): split off the rows that cannot be messages, send the
// rest within the lease, let the circuits judge the outcome, sort each row
// into its finish outcome, finish the batch and report it.

// deliver sends one claimed batch and finishes it, in steps: build the
// messages, send them within the lease, let the circuits judge the
// outcome, sort each row into its finish outcome, finish and report.
// claimStart is when the claim statement was sent: the lease, taken on
// the database clock during the statement, ends no earlier than
// claimStart + lease duration on this process's monotonic clock (which
// keeps counting while the process is paused, as with SIGSTOP).
func (l *lane) deliver(b batch, t ticket, claimStart time.Time) {
	rows, invalid := l.splitInvalid(b.Rows())
	if l.s.ordered() {
		inKeyOrder(rows) // relay/ordered.go
	}
	ev := txbox.BatchEvent{EventType: l.s.eventType, Route: l.s.routeName, Sender: l.s.senderName, Destination: l.dest, Claim: l.s.claim}
	var items []store.OutboxFinishItem
	if len(rows) == 0 {
		l.circuit.abandon(t)
	} else {
		msgs := messages(rows, l.s.route, l.deps.tenant)
		bt := l.startTrace(msgs)
		sent := l.sendWithinLease(bt, msgs, claimStart, b.Scope())
		bt.end(sent)
		ev.SendDuration = sent.took
		verdicts := l.judgeSent(t, msgs, sent)
		items = make([]store.OutboxFinishItem, len(rows))
		for i, row := range rows {
			items[i] = l.outcome(row, sent.results[i], sent.classes[i], verdicts[i], sent.stopped)
		}
		countOutcomes(&ev, items)
		l.logRefusals(t, sent, ev, items)
		l.noteRefusals(ev, items)
	}
	countOutcomes(&ev, invalid)
	items = append(items, invalid...)
	l.report(ev, len(items), b.Finish(items))
}

// report logs a finished batch and hands it, ev, to the hooks: the one
// reporting path of every claim mode. rows is how many rows it had.
func (l *lane) report(ev txbox.BatchEvent, rows int, fr finishReport) {
	ev.FinishDuration = fr.took
	if fr.fenced > 0 {
		ev.Fenced = fr.fenced
		l.log.Warn(fr.fencedWhy, slog.Int("fenced", fr.fenced))
	}
	if fr.err != nil {
		ev.FinishErr = fr.err
		l.log.Error(fr.failedWhy, slog.Int("rows", rows), slog.Any("error", fr.err))
	}
	l.log.Debug("finished", slog.String("claim", string(l.s.claim)),
		slog.Int("sent", ev.Sent), slog.Int("retried", ev.Retried), slog.Int("failed", ev.Failed), slog.Int("released", ev.Released),
		slog.Int("fenced", ev.Fenced), slog.Duration("send_took", ev.SendDuration), slog.Duration("took", ev.FinishDuration))
	for _, h := range l.deps.hooks {
		h.OnBatch(ev)
	}
}

// splitInvalid separates the rows a dialect could not turn into a message
// (store.OutboxRow.Invalid) from the rest. They are never sent: each one
// fails at once with its reason, as a permanent error would, so it goes to
// the dead-letter table while the rest of its batch is delivered
// (docs/concepts.md). On an ordered type the failed row parks its key, so
// the rows of that key behind it in the batch (a key run) are released
// unsent, without an attempt, exactly as when a sent row of a run fails.
func (l *lane) splitInvalid(rows []*store.OutboxRow) ([]*store.OutboxRow, []store.OutboxFinishItem) {
	var failed []store.OutboxFinishItem
	var parked map[string]txbox.ID // key -> its first invalid row
	for _, row := range rows {
		if row.EventType == store.UndecodableEventType && row.Invalid == "" {
			// Its payload is the raw bytes of a stream event that could
			// not be decoded: never a message (docs/operations.md, "WAL
			// mode").
			row.Invalid = "an undecodable stream event (" + store.UndecodableEventType + ") is never sent; re-emit its payload once the relay can decode it"
		}
		if row.Invalid == "" {
			continue
		}
		msg := store.NotSentPrefix + "the row cannot be turned into a message: " + row.Invalid
		if len(msg) > maxErrorText {
			msg = strings.ToValidUTF8(msg[:maxErrorText], "")
		}
		failed = append(failed, store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken, Outcome: store.OutcomeFailed, Error: msg})
		l.log.Warn("row cannot be turned into a message; dead-lettering it", slog.String("event_id", row.ID.String()), slog.String("reason", row.Invalid))
		if l.s.ordered() && row.Key != "" {
			if parked == nil {
				parked = map[string]txbox.ID{}
			}
			if first, ok := parked[row.Key]; !ok || bytes.Compare(row.ID[:], first[:]) < 0 {
				parked[row.Key] = row.ID
			}
		}
	}
	if failed == nil {
		return rows, nil
	}
	valid := make([]*store.OutboxRow, 0, len(rows)-len(failed))
	for _, row := range rows {
		if row.Invalid != "" {
			continue
		}
		if first, ok := parked[row.Key]; ok && bytes.Compare(row.ID[:], first[:]) > 0 {
			failed = append(failed, store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken, Outcome: store.OutcomeReleased})
			continue
		}
		valid = append(valid, row)
	}
	return valid, failed
}

// messages turns claimed rows into the messages to send, with the
// headers every message carries (docs/concepts.md, "Headers"), and the
// tenant's when tenant is set.
func messages(rows []*store.OutboxRow, route sender.Route, tenant string) []*sender.Message {
	msgs := make([]*sender.Message, len(rows))
	block := make([]sender.Message, len(rows)) // one allocation, not one per message
	for i, row := range rows {
		h := make(map[string]string, len(row.Headers)+4)
		maps.Copy(h, row.Headers)
		if tenant != "" {
			h[txbox.HeaderTenant] = tenant
		}
		h[txbox.HeaderEventID] = row.Event().String()
		h[txbox.HeaderEventType] = row.EventType
		h[txbox.HeaderCreatedAt] = row.CreatedAt.UTC().Format(time.RFC3339Nano)
		block[i] = sender.Message{
			ID: row.Event(), DeliveryID: row.ID, EventType: row.EventType, Key: row.Key, Payload: row.Payload,
			Headers: h, CreatedAt: row.CreatedAt, Attempt: row.Attempts + 1, Route: route,
		}
		msgs[i] = &block[i]
	}
	return msgs
}

// sendResult is what came of sending one batch.
type sendResult struct {
	// results has one entry per message, nil when it was acked; classes
	// the class of each (txbox.Classify, asked once per message here and
	// read by the circuit, the trace and the outcome).
	results []error
	classes []txbox.ErrorClass
	// start is when Send began, took how long it ran; zero when the
	// batch was not sent.
	start time.Time
	took  time.Duration
	// stopped is true when the lease ran out before the send or the
	// relay is past its stop deadline: the outcome says nothing about
	// the destination, and every row that was not acked is released.
	stopped bool
}

// sendBegins records a send that begins now, until the returned func is
// called.
func (l *lane) sendBegins() (ended func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.sending == nil {
		l.sending = map[uint64]time.Time{}
	}
	l.sends++
	n := l.sends
	l.sending[n] = time.Now()
	return func() {
		l.mu.Lock()
		delete(l.sending, n)
		l.mu.Unlock()
	}
}

// errScopeEnded marks the messages of a batch whose source let go of it
// (batch.Scope ended) before they were acknowledged.
var errScopeEnded = errors.New("relay: not sent: the batch's source let go of it")

// sendWithinLease sends msgs so that the send ends within the lease, with
// a margin for the finish: past it another relay may own the rows, so
// sending would only make duplicates and our finish would be fenced
// anyway. A batch whose lease is already (nearly) over, such as one
// claimed just before this process was paused, is not sent at all. The
// send also ends when scope (batch.Scope) does; the batch then counts as
// stopped, and an ordered batch sends none of its later waves.
//
// Both checks come last before the send, after its start is taken: a
// process stopped (SIGSTOP) before that instant is found paused by them
// (the lease is over, or a stream batch's scope ends: its Err runs the
// pause check, streamBatch.Scope), so no send whose start follows a pause
// goes out. Checked earlier, a stop between the checks and the send let
// the resumed relay send a batch of a stream it no longer held. A stop
// after the checks lands in a send already begun, as in any batch in
// flight: its context ends when the pause watch or the lease notices.
func (l *lane) sendWithinLease(bt *batchTrace, msgs []*sender.Message, claimStart time.Time, scope context.Context) sendResult {
	deadline := claimStart.Add(l.s.leaseDuration - l.s.leaseDuration/10)
	base := l.deps.hard
	if bt != nil {
		base = bt.ctx // the batch span, for an instrumented sender
	}
	ctx, cancel := context.WithDeadline(base, deadline)
	defer cancel()
	defer context.AfterFunc(scope, cancel)()
	start := time.Now()
	if !start.Before(deadline) {
		l.log.Warn("lease ran out before the batch was sent; releasing it unsent", slog.Int("rows", len(msgs)))
		return unsentResult(errLeaseLost, len(msgs))
	}
	if scope.Err() != nil {
		return unsentResult(errScopeEnded, len(msgs))
	}
	defer l.sendBegins()()
	err := l.send(ctx, msgs)
	took := time.Since(start)
	results := sender.Results(err, len(msgs))
	classes := classify(results)
	stopped := l.deps.hard.Err() != nil || scope.Err() != nil
	if ctx.Err() != nil && !stopped {
		l.cutAtLeaseEnd(results, classes)
	}
	return sendResult{results: results, classes: classes, start: start, took: took, stopped: stopped}
}

// unsentResult is the result of a batch not sent at all, each message
// marked err: it counts as stopped.
func unsentResult(err error, n int) sendResult {
	results := sender.Results(err, n)
	return sendResult{results: results, classes: classify(results), stopped: true}
}

// classify classifies each result (txbox.Classify) once: an ack's class
// is never read.
func classify(results []error) []txbox.ErrorClass {
	classes := make([]txbox.ErrorClass, len(results))
	for i, res := range results {
		if res != nil {
			classes[i] = txbox.Classify(res)
		}
	}
	return classes
}

// cutAtLeaseEnd marks the transient failures of a send that the lease's
// deadline cut short as errLeaseCut: the relay's own time budget ran out,
// which says nothing about those messages, so they are released without
// an attempt and left out of the circuits' judgement. A message that
// hangs the destination is judged by the sender's own timeout, which must
// be shorter than the lease; a batch that does not fit in its lease is
// logged so the lease or batch size can be changed.
func (l *lane) cutAtLeaseEnd(results []error, classes []txbox.ErrorClass) {
	cut := 0
	for i, res := range results {
		if res != nil && classes[i] == txbox.ClassTransient {
			results[i] = errLeaseCut
			cut++
		}
	}
	if cut > 0 {
		l.log.Warn("lease ran out while sending; releasing the unacknowledged rows without an attempt (raise lease or lower batch-size if this repeats)",
			slog.Int("rows", cut), slog.Int("batch", len(results)), slog.Duration("lease", l.s.leaseDuration))
	}
}

// judgeSent lets the circuits judge a sent batch, and returns one verdict
// per message: they say which transient failures are the message's own
// fault (they count an attempt); see circuitPair.assess. A batch that was stopped
// proves nothing and is not judged: its verdicts are all zero. Nor are the
// messages whose outcome says nothing about the message or its
// destination (unjudged: a row of an ordered batch left unsent, a send
// cut short by the lease's end): each is released at once without an
// attempt. When nothing at all was answered within the whole lease, that
// is the destination's to answer for (its circuit hears of it), not the
// messages' (no attempt).
func (l *lane) judgeSent(t ticket, msgs []*sender.Message, sent sendResult) []verdict {
	out := make([]verdict, len(msgs))
	if sent.stopped {
		l.circuit.abandon(t)
		return out
	}
	var ids []txbox.ID
	var results []error
	var classes []txbox.ErrorClass
	for i, m := range msgs {
		if !unjudged(sent.results[i]) {
			ids = append(ids, m.ID)
			results = append(results, sent.results[i])
			classes = append(classes, sent.classes[i])
		}
	}
	if len(results) == 0 {
		if slices.ContainsFunc(sent.results, func(res error) bool { return errors.Is(res, errLeaseCut) }) {
			all := make([]txbox.ID, len(msgs))
			for i, m := range msgs {
				all[i] = m.ID
			}
			l.circuit.assess(t, sent.start, all, sent.results, sent.classes)
			return out
		}
		l.circuit.abandon(t)
		return out
	}
	vs := l.circuit.assess(t, sent.start, ids, results, classes)
	j := 0
	for i, res := range sent.results {
		if unjudged(res) {
			continue // verdict{}: released, due now, no attempt
		}
		out[i] = vs[j]
		j++
	}
	return out
}

// outcome is the finish of one sent row whose send ended with res (nil:
// acked) of class c, judged v; stopped is sendResult.stopped.
func (l *lane) outcome(row *store.OutboxRow, res error, c txbox.ErrorClass, v verdict, stopped bool) store.OutboxFinishItem {
	it := store.OutboxFinishItem{ID: row.ID, LeaseToken: row.LeaseToken}
	switch {
	case res == nil:
		it.Outcome = store.OutcomeAcked
	case stopped || (c == txbox.ClassTransient && !v.count):
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
	case c == txbox.ClassPermanent:
		it.Outcome = store.OutcomeFailed
		it.Error = errorText(res)
	default: // rejected, or failing transiently while the destination accepts others
		it.Error = errorText(res)
		if row.Attempts+1 >= l.s.maxAttempts {
			it.Outcome = store.OutcomeFailed
		} else {
			it.Outcome = store.OutcomeRetry
			it.RetryAfter = l.s.backoff.policy().Delay(row.Attempts + 1)
		}
	}
	return it
}

// countOutcomes adds the outcomes of items to ev.
func countOutcomes(ev *txbox.BatchEvent, items []store.OutboxFinishItem) {
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
func (l *lane) logRefusals(t ticket, sent sendResult, ev txbox.BatchEvent, items []store.OutboxFinishItem) {
	n := len(items)
	if t.probe && !sent.stopped && ev.Released == n {
		l.log.Warn("probe batch failed; destination still unavailable", slog.Any("error", firstError(sent.results)))
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
		l.log.Warn(msg, slog.String("event_id", it.ID.String()), slog.String("reason", it.Error))
	}
	if n := ev.Failed + ev.Retried; n > logged {
		l.log.Warn("more messages rejected in this batch", slog.Int("not_logged", n-logged),
			slog.Int("retried", ev.Retried), slog.Int("failed", ev.Failed))
	}
}

// noteRefusals records what the destination made of a finished batch,
// for TypeHealth's rejection fields: an acknowledgement ends a run of
// refusals; a batch with refused messages and none acknowledged starts or
// continues one. A batch that was only released (an outage, a stop) says
// nothing about refusals.
func (l *lane) noteRefusals(ev txbox.BatchEvent, items []store.OutboxFinishItem) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case ev.Sent > 0:
		l.rejectingSince, l.lastRejected, l.lastRejection = time.Time{}, time.Time{}, ""
	case ev.Retried+ev.Failed > 0:
		now := time.Now()
		if l.rejectingSince.IsZero() {
			l.rejectingSince = now
		}
		l.lastRejected = now
		for _, it := range items {
			if it.Error != "" {
				l.lastRejection = it.Error
				break
			}
		}
	}
}

// maxRefusalLines bounds the per-message WARN lines of one batch.
const maxRefusalLines = 10

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

// finishContext bounds one finish statement: finishTimeout, or
// finishTimeoutAfterDeadline once the relay is past its stop deadline. It
// is not cancelled by the stop: a shutdown must not strand rows it could
// still finish.
func (l *lane) finishContext() (context.Context, context.CancelFunc) {
	timeout := finishTimeout
	if l.deps.hard.Err() != nil {
		timeout = finishTimeoutAfterDeadline
	}
	return context.WithTimeout(context.WithoutCancel(l.deps.hard), timeout)
}
