package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// A lane holds one event type's events from the stream until they are
// sent, and hands them in batches to the type's delivery (relay/deliver.go)
// through a poller of its own: the same send, judge and report path as a
// claimed batch, with the same circuit. Its batches (streamBatch) finish by
// marking events done, and by spilling the ones not acked into the outbox
// table, where the table poller retries them with the usual backoff.

// ClaimStream is the claim mode a WAL-mode lane shows in Health.Types:
// its events come from the stream, not from a claim. It is never a
// configuration value.
const ClaimStream ClaimMode = "stream"

// streamLane is one event type's queue of stream events.
type streamLane struct {
	src     *streamSource
	p       *poller
	ordered bool

	mu     sync.Mutex
	queue  []*streamItem
	notify chan struct{}
	// room is closed when events leave the queue, for a push waiting
	// for room; nil while none waits. overflowing is set when the lane
	// stayed full for laneStall: its events spill until it drained to
	// half.
	room        chan struct{}
	overflowing bool
}

// lane returns the lane of eventType, making it (and its worker) on the
// type's first event.
func (s *streamSource) lane(eventType string) (*streamLane, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lanes[eventType]; ok {
		return l, nil
	}
	set, err := s.r.cfg.settingsFor(eventType)
	if err != nil {
		return nil, err
	}
	set.claim = ClaimStream
	if !set.batchSizeSet {
		set.batchSize = s.cfg.BatchSize
	}
	ordered := set.ordering == OrderingKey
	if ordered {
		// One batch at a time: a key's later event is sent only once its
		// earlier ones are acked or spilled (relay/ordered.go sends a
		// batch's key runs in waves).
		set.inFlight = 1
	}
	l := &streamLane{src: s, p: newPoller(s.r.pollerDeps(), set), ordered: ordered, notify: make(chan struct{}, 1)}
	s.lanes[eventType] = l
	s.r.wg.Add(1)
	go l.run()
	return l, nil
}

// laneStall is how long the stream waits for room in a full lane before it
// lets the lane's events spill. A lane that drains (a backlog, a fast
// destination) makes room within milliseconds, so its events are not
// spilled; a lane that stays full belongs to a destination slower than
// the stream, and waiting longer would hold back every other type.
const laneStall = 100 * time.Millisecond

// push queues it, waiting up to laneStall for room while the lane is
// full; a lane that stayed full spills its events until it has drained to
// half (overflowing), and on an ordered lane an event whose key has rows
// in the table spills behind them. It returns false only when ctx ended
// before the event was queued or spilled; the caller drops it.
func (l *streamLane) push(ctx context.Context, it *streamItem) bool {
	var timer *time.Timer
	for {
		l.mu.Lock()
		if l.overflowing && len(l.queue) <= l.src.cfg.LaneQueue/2 {
			l.overflowing = false // drained: take events again
		}
		switch {
		case l.ordered && l.src.mustSpill(it.ev.Row.EventType, it.ev.Row.Key), l.overflowing:
			l.spillLocked(it, store.OutcomeReleased, time.Now(), "")
			l.mu.Unlock()
			return true
		case len(l.queue) < l.src.cfg.LaneQueue:
			l.queue = append(l.queue, it)
			l.mu.Unlock()
			select {
			case l.notify <- struct{}{}:
			default:
			}
			return true
		}
		if l.room == nil {
			l.room = make(chan struct{})
		}
		room := l.room
		l.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(laneStall)
			defer timer.Stop()
		}
		select {
		case <-room:
		case <-ctx.Done():
			return false
		case <-timer.C:
			// Full for a whole stall: the destination is slower than the
			// stream. Spill this lane's events until it has drained to
			// half, without waiting for each.
			l.mu.Lock()
			l.overflowing = true
			l.mu.Unlock()
		}
	}
}

// spill spills it; on an ordered lane the queued events of its key spill
// first, in queue order: they are earlier in the stream, and the table
// orders a key by the spills' order.
func (l *streamLane) spill(it *streamItem, o store.Outcome, due time.Time, errText string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.spillLocked(it, o, due, errText)
}

// spillLocked is spill with l.mu held. Every spill of an ordered lane's
// event is queued under l.mu, so a key's spills reach the one spill writer
// in stream order.
func (l *streamLane) spillLocked(it *streamItem, o store.Outcome, due time.Time, errText string) {
	if l.ordered {
		l.spillQueuedLocked(it.ev.Row.Key)
	}
	l.src.spillNow(it, o, due, errText)
}

// spillQueuedLocked spills the queued events of key, in queue order (every
// queued event when the type has more spilled keys than it remembers);
// l.mu is held. Keyless events keep no order and stay queued.
func (l *streamLane) spillQueuedLocked(key string) {
	all := l.src.mustSpill(l.p.s.eventType, "")
	if key == "" && !all {
		return
	}
	keep := l.queue[:0]
	for _, q := range l.queue {
		if all || q.ev.Row.Key == key {
			l.src.spillNow(q, store.OutcomeReleased, time.Now(), "")
		} else {
			keep = append(keep, q)
		}
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	l.roomLocked()
}

// roomLocked wakes a push waiting for room; l.mu is held.
func (l *streamLane) roomLocked() {
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
}

// take takes up to n queued events for a batch. It drops the events of a
// session that is over (the stream reads them again) and, on an ordered
// lane, spills the events of a key that spilled since they were queued.
func (l *streamLane) take(n int) []*streamItem {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.queue))
	out := make([]*streamItem, 0, n)
	for _, it := range l.queue[:n] {
		switch {
		case !l.src.checkPause(it.s):
			l.src.drop(it)
		case l.ordered && l.src.mustSpill(it.ev.Row.EventType, it.ev.Row.Key):
			l.src.spillNow(it, store.OutcomeReleased, time.Now(), "")
		default:
			out = append(out, it)
		}
	}
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	if n > 0 {
		l.roomLocked()
	}
	return out
}

// spillAll spills every queued event, due at due: the destination's
// circuit is open.
func (l *streamLane) spillAll(due time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, it := range l.queue {
		l.src.spillNow(it, store.OutcomeReleased, due, "")
	}
	clear(l.queue)
	l.queue = l.queue[:0]
	l.roomLocked()
}

func (l *streamLane) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// run is the lane's worker: take an in-flight slot, ask the circuit, make
// a batch of the queued events and dispatch it. While the circuit is
// open, the queued events spill: the poller takes them once it closes.
func (l *streamLane) run() {
	defer l.src.r.wg.Done()
	ctx := l.src.r.runCtx
	p := l.p
	for {
		select {
		case <-ctx.Done():
			return
		case <-l.notify:
		}
		for l.queued() > 0 {
			select {
			case <-ctx.Done():
				return
			case p.slots <- struct{}{}:
			}
			t := p.circuit.allow()
			if !t.ok {
				<-p.slots
				l.spillAll(time.Now().Add(t.wait))
				continue
			}
			limit := p.s.batchSize
			if t.probe {
				limit = min(limit, probeBatchSize)
			}
			items := l.take(limit)
			if len(items) == 0 {
				p.circuit.abandon(t)
				<-p.slots
				continue
			}
			p.dispatch(newStreamBatch(l, items), t, time.Now())
		}
	}
}

// dropQueued drops every queued event of ss: the session is over, and its
// unconfirmed transactions will be read again.
func (s *streamSource) dropQueued(ss *session) {
	s.mu.Lock()
	lanes := make([]*streamLane, 0, len(s.lanes))
	for _, l := range s.lanes {
		lanes = append(lanes, l)
	}
	s.mu.Unlock()
	for _, l := range lanes {
		l.mu.Lock()
		keep := l.queue[:0]
		var gone []*streamItem
		for _, it := range l.queue {
			if it.s == ss {
				gone = append(gone, it)
			} else {
				keep = append(keep, it)
			}
		}
		l.queue = keep
		l.mu.Unlock()
		for _, it := range gone {
			s.drop(it)
		}
	}
}

// drop lets go of an event without finishing it: its transaction is not
// confirmed, so the stream delivers it again.
func (s *streamSource) drop(it *streamItem) {
	s.window.release(eventSize(it.ev))
	it.s.work.Done()
}

// streamBatch is a batch of stream events (the batch of relay/batch.go).
type streamBatch struct {
	l     *streamLane
	items []*streamItem
	rows  []*store.OutboxRow
	// byID finds a finished row's events: usually one, more when a
	// producer emitted one id twice (the table's primary key forbids that
	// in table mode, nothing does in the WAL).
	byID map[[16]byte][]*streamItem
}

func newStreamBatch(l *streamLane, items []*streamItem) *streamBatch {
	b := &streamBatch{l: l, items: items, rows: make([]*store.OutboxRow, len(items)), byID: make(map[[16]byte][]*streamItem, len(items))}
	for i, it := range items {
		// A key's order in the stream is its commit order: the batch's
		// key runs go in stream position order (relay/ordered.go).
		it.ev.Row.Seq = it.ev.Pos
		b.rows[i] = &it.ev.Row
		b.byID[it.ev.Row.ID] = append(b.byID[it.ev.Row.ID], it)
	}
	return b
}

func (b *streamBatch) Rows() []*store.OutboxRow { return b.rows }

// Finish marks the acked events done and spills the others; it returns
// once the spills are durable.
func (b *streamBatch) Finish(items []store.OutboxFinishItem) finishReport {
	start := time.Now()
	src := b.l.src
	var spills []*spillJob
	var acked []*streamItem
	for _, fi := range items {
		its := b.byID[fi.ID]
		if len(its) == 0 {
			continue
		}
		it := its[0]
		b.byID[fi.ID] = its[1:]
		if fi.Outcome == store.OutcomeAcked {
			acked = append(acked, it)
			continue
		}
		spills = append(spills, spillWork(it, fi.Outcome, time.Now().Add(fi.RetryAfter), fi.Error))
	}
	// An event the delivery gave no outcome would hold its transaction
	// (and the window) for ever: it goes to the table instead.
	for _, its := range b.byID {
		for _, it := range its {
			spills = append(spills, spillWork(it, store.OutcomeReleased, time.Now(), ""))
		}
	}
	for _, it := range acked {
		src.done(it, true)
	}
	fr := finishReport{failedWhy: "spill failed", fencedWhy: "stream events not finished"}
	if len(spills) > 0 {
		<-b.l.enqueueFinished(spills)
	}
	fr.took = time.Since(start)
	return fr
}

// enqueueFinished queues a finished batch's spills. On an ordered lane the
// queued events of their keys follow them at once, under l.mu: they are
// later in the stream than the batch, earlier than any event routed after.
func (l *streamLane) enqueueFinished(spills []*spillJob) chan struct{} {
	if !l.ordered {
		return l.src.enqueueSpill(spills)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	done := l.src.enqueueSpill(spills)
	seen := map[string]bool{}
	for _, w := range spills {
		if k := w.it.ev.Row.Key; !seen[k] {
			seen[k] = true
			l.spillQueuedLocked(k)
		}
	}
	return done
}

// spillJob is one event on its way into the outbox table.
type spillJob struct {
	it   *streamItem
	item store.StreamSpillItem
}

func spillWork(it *streamItem, o store.Outcome, due time.Time, errText string) *spillJob {
	attempts := it.ev.Row.Attempts
	if o == store.OutcomeRetry || o == store.OutcomeFailed {
		attempts++
	}
	return &spillJob{it: it, item: store.StreamSpillItem{Event: it.ev, Outcome: o, Attempts: attempts, DueAt: due, Error: errText}}
}

// spillReq is one group of spills for the spill writer; done is closed
// once they are durable.
type spillReq struct {
	work []*spillJob
	done chan struct{}
}

// spillNow spills one event, without waiting.
func (s *streamSource) spillNow(it *streamItem, o store.Outcome, due time.Time, errText string) {
	s.enqueueSpill([]*spillJob{spillWork(it, o, due, errText)})
}

// spillAndWait spills work and waits until it is durable.
func (s *streamSource) spillAndWait(work []*spillJob) {
	<-s.enqueueSpill(work)
}

// enqueueSpill marks the ordered keys of work as spilled (before the
// spill commits: a later event of the key that is routed meanwhile must
// go behind it) and queues the spill.
func (s *streamSource) enqueueSpill(work []*spillJob) chan struct{} {
	for _, w := range work {
		if s.orderedType(w.it.ev.Row.EventType) {
			s.markSpilled(w.it.ev.Row.EventType, w.it.ev.Row.Key)
		}
	}
	req := &spillReq{work: work, done: make(chan struct{})}
	s.spills <- req
	return req.done
}

// orderedType reports whether eventType is delivered in key order.
func (s *streamSource) orderedType(eventType string) bool {
	s.mu.Lock()
	l, ok := s.lanes[eventType]
	s.mu.Unlock()
	if ok {
		return l.ordered
	}
	set, err := s.r.cfg.settingsFor(eventType)
	return err == nil && set.ordering == OrderingKey
}

// maxSpillGroup bounds the events of one spill statement.
const maxSpillGroup = 500

// spillWriter writes the spills in the order they were queued, folding
// the queued groups into one statement, and retries a failed write until
// it lands: an event is done only once its spill is durable. It runs until
// the relay's goroutines are done with it: it stops after the hard stop.
func (s *streamSource) spillWriter() {
	defer s.r.wg.Done()
	errs := backoff.Streak{Policy: errorBackoff}
	var idle <-chan struct{}
	for {
		reqs := s.nextSpills(&idle)
		if reqs == nil {
			return
		}
		s.writeSpills(reqs, &errs)
	}
}

// nextSpills waits for queued spills and takes up to maxSpillGroup events
// of them; nil once the relay stops and no session holds events.
func (s *streamSource) nextSpills(idle *<-chan struct{}) []*spillReq {
	var reqs []*spillReq
	select {
	case req := <-s.spills:
		reqs = append(reqs, req)
	case <-s.r.runCtx.Done():
		// Stop began: keep writing while batches in flight finish.
		if *idle == nil {
			*idle = s.idle()
		}
		select {
		case req := <-s.spills:
			reqs = append(reqs, req)
		case <-*idle:
			return nil
		}
	}
	n := len(reqs[0].work)
	for n < maxSpillGroup {
		select {
		case req := <-s.spills:
			reqs = append(reqs, req)
			n += len(req.work)
		default:
			return reqs
		}
	}
	return reqs
}

// writeSpills writes one group of spills, retrying until it lands or the
// stop deadline passes, and marks its events done.
func (s *streamSource) writeSpills(reqs []*spillReq, errs *backoff.Streak) {
	reqs = s.dropPaused(reqs)
	var items []*store.StreamSpillItem
	failed := false
	for _, r := range reqs {
		for _, w := range r.work {
			items = append(items, &w.item)
			failed = failed || w.item.Outcome == store.OutcomeFailed
		}
	}
	if len(items) == 0 {
		s.finishSpills(reqs, nil)
		return
	}
	for {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.r.hardCtx), finishTimeout)
		err := s.streamer.StreamSpill(ctx, items)
		cancel()
		if err == nil {
			errs.Reset()
			break
		}
		if s.r.hardCtx.Err() != nil {
			// Past the stop deadline: leave the events unconfirmed, the
			// stream delivers them again.
			s.log.Error("spill failed at the stop deadline; the events stay unconfirmed", slog.Int("events", len(items)), slog.Any("error", err))
			s.finishSpills(reqs, s.drop)
			return
		}
		wait := errs.Next()
		s.log.Warn("spill failed; retrying", slog.Int("events", len(items)), slog.Any("error", err), slog.Duration("retry_in", wait))
		s.sleep(context.WithoutCancel(s.r.hardCtx), wait)
	}
	s.mu.Lock()
	s.health.Spilled += int64(len(items))
	s.mu.Unlock()
	if failed {
		// The mover takes FAILED rows to the dead-letter table, where an
		// ordered key is parked: now, not at its next backed-off round.
		sendKick(s.r.kicks.deadLetter, kickNow)
	}
	s.finishSpills(reqs, func(it *streamItem) { s.done(it, false) })
}

// finishSpills hands each event of reqs to end and wakes their waiters.
func (s *streamSource) finishSpills(reqs []*spillReq, end func(*streamItem)) {
	for _, r := range reqs {
		for _, w := range r.work {
			end(w.it)
		}
		close(r.done)
	}
}

// dropPaused lets go of the spills of a session that ended because the
// process was paused (pauseWatch): another relay likely streams their
// transactions again by now, and delivers or spills them itself. Written
// here, they would come back through the table poller as duplicates, and
// an ordered key's spill would reach the table after the new relay
// delivered later events of that key. Dropped, they stay unconfirmed, as
// the paused session's queued events do. It checks the pause itself, since
// the writer may run before pauseWatch's first late tick.
func (s *streamSource) dropPaused(reqs []*spillReq) []*spillReq {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		s.checkPause(cur)
	}
	var gone []*streamItem
	s.mu.Lock()
	for _, r := range reqs {
		// A new slice, and only when something goes: the caller may
		// still read the one it queued (enqueueFinished does).
		var keep []*spillJob
		cut := false
		for i, w := range r.work {
			switch {
			case w.it.s.paused:
				if !cut {
					keep, cut = append([]*spillJob(nil), r.work[:i]...), true
				}
				gone = append(gone, w.it)
			case cut:
				keep = append(keep, w)
			}
		}
		if cut {
			r.work = keep
		}
	}
	s.health.PauseDropped += int64(len(gone))
	s.mu.Unlock()
	for _, it := range gone {
		s.drop(it)
	}
	if len(gone) > 0 {
		s.log.Warn("the relay was paused; dropping its spills unwritten", slog.Int("events", len(gone)))
	}
	return reqs
}

// idle is closed once no session holds events: nothing more can be
// spilled.
func (s *streamSource) idle() <-chan struct{} {
	c := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for range t.C {
			if n, _ := s.window.held(); n == 0 || s.r.hardCtx.Err() != nil {
				close(c)
				return
			}
		}
	}()
	return c
}
