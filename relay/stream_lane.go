package relay

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox/store"
)

// A lane holds one event type's events from the stream until they are
// sent, and hands them in batches to the type's lane (relay/lane.go): the
// same send, judge and report path as a claimed batch, with the same
// circuit. Its batches (streamBatch) finish by
// marking events done, and by sending the ones not acked to the outbox
// table, where the table poller retries them with the usual backoff. On
// an ordered type every move of a key's events goes through the key's one
// state (relay/stream_keys.go).

// ClaimStream is the claim mode a WAL-mode lane shows in Health.Types:
// its events come from the stream, not from a claim. It is never a
// configuration value.
const ClaimStream ClaimMode = "stream"

// streamLane is one event type's queue of stream events.
type streamLane struct {
	src     *streamSource
	lane    *lane
	ordered bool

	mu     sync.Mutex
	queue  []*streamItem
	notify chan struct{}
	// room is closed when events leave the queue, for a push waiting
	// for room; nil while none waits. overflowing is set when the lane
	// stayed full for laneStall: its events go to the table until it
	// drained to half.
	room        chan struct{}
	overflowing bool
	// keys are the states of an ordered type's keys (keyState).
	keys map[string]*keyState
}

// lane returns the lane of eventType, making it (and its worker) on the
// type's first event.
func (s *streamSource) lane(eventType string) (*streamLane, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if l, ok := s.lanes[eventType]; ok {
		return l, nil
	}
	set, err := s.env.settingsFor(eventType)
	if err != nil {
		return nil, err
	}
	set.claim = ClaimStream
	if !set.batchSizeSet {
		set.batchSize = s.cfg.BatchSize
	}
	ordered := set.ordered()
	if ordered {
		// One batch at a time: a key's later event is sent only once its
		// earlier ones are acked or spilled (relay/ordered.go sends a
		// batch's key runs in waves).
		set.inFlight = 1
	}
	l := &streamLane{src: s, lane: s.env.newLane(set), ordered: ordered, notify: make(chan struct{}, 1), keys: map[string]*keyState{}}
	s.lanes[eventType] = l
	s.env.life.Go(l.run)
	return l, nil
}

// laneList is every lane; s.mu is held.
func (s *streamSource) laneList() []*streamLane {
	lanes := make([]*streamLane, 0, len(s.lanes))
	for _, l := range s.lanes {
		lanes = append(lanes, l)
	}
	return lanes
}

// laneStall is how long the stream waits for room in a full lane before it
// lets the lane's events go to the table. A lane that drains (a backlog, a
// fast destination) makes room within milliseconds, so its events are not
// spilled; a lane that stays full belongs to a destination slower than
// the stream, and waiting longer would hold back every other type.
const laneStall = 100 * time.Millisecond

// push queues it, waiting up to laneStall for room while the lane is
// full; a lane that stayed full sends its events to the table until it
// has drained to half (overflowing), and on an ordered lane an event
// whose key is bound for the table goes there behind the key's earlier
// events. It returns false only when ctx ended before the event was
// queued or sent on; the caller drops it.
func (l *streamLane) push(ctx context.Context, it *streamItem) bool {
	var timer *time.Timer
	key := it.ev.Row.Key
	keyed := l.ordered && key != ""
	for {
		l.mu.Lock()
		if l.overflowing && len(l.queue) <= l.src.cfg.LaneQueue/2 {
			l.overflowing = false // drained: take events again
		}
		switch {
		case keyed && l.toTableLocked(key, l.keys[key]), l.overflowing:
			l.tableLocked(it, store.OutcomeReleased, time.Now(), "")
			l.mu.Unlock()
			return true
		case len(l.queue) < l.src.cfg.LaneQueue:
			l.queue = append(l.queue, it)
			if keyed {
				l.keyLocked(key).queued++
			}
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
			// stream. Send this lane's events to the table until it has
			// drained to half, without waiting for each.
			l.mu.Lock()
			l.overflowing = true
			l.mu.Unlock()
		}
	}
}

// toTable sends it to the table (see tableLocked).
func (l *streamLane) toTable(it *streamItem, o store.Outcome, due time.Time, errText string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.tableLocked(it, o, due, errText)
}

// roomLocked wakes a push waiting for room; l.mu is held.
func (l *streamLane) roomLocked() {
	if l.room != nil {
		close(l.room)
		l.room = nil
	}
}

// take takes up to n queued events for a batch. It drops the events of a
// session that is over (the stream reads them again); on an ordered lane
// the events taken count as their keys' sending ones.
func (l *streamLane) take(n int) []*streamItem {
	l.mu.Lock()
	defer l.mu.Unlock()
	n = min(n, len(l.queue))
	out := make([]*streamItem, 0, n)
	for _, it := range l.queue[:n] {
		var k *keyState
		if l.ordered && it.ev.Row.Key != "" {
			k = l.keys[it.ev.Row.Key]
			k.queued--
		}
		if !l.src.checkPause(it.s) {
			l.src.drop(it)
			if k != nil {
				l.forgetLocked(it.ev.Row.Key, k)
			}
			continue
		}
		if k != nil {
			k.sending++
		}
		out = append(out, it)
	}
	rest := copy(l.queue, l.queue[n:])
	clear(l.queue[rest:])
	l.queue = l.queue[:rest]
	if n > 0 {
		l.roomLocked()
	}
	return out
}

// tableAll sends every queued event to the table, due at due: the
// destination's circuit is open. Nothing of the lane is being sent (the
// worker holds the lane's one slot), so nothing waits.
func (l *streamLane) tableAll(due time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	queued := l.queue
	l.queue = nil
	for _, it := range queued {
		if k := l.keys[it.ev.Row.Key]; l.ordered && k != nil {
			k.queued--
		}
	}
	for _, it := range queued {
		l.tableLocked(it, store.OutcomeReleased, due, "")
	}
	l.roomLocked()
}

func (l *streamLane) queued() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.queue)
}

// run is the lane's worker: take an in-flight slot, ask the circuit, make
// a batch of the queued events and dispatch it. While the circuit is
// open, the queued events go to the table: the poller takes them once it
// closes.
func (l *streamLane) run() {
	ctx := l.src.env.run
	d := l.lane
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
			case d.slots <- struct{}{}:
			}
			t := d.circuit.allow()
			if !t.ok {
				<-d.slots
				l.tableAll(time.Now().Add(t.wait))
				continue
			}
			limit := d.s.batchSize
			if t.probe {
				limit = min(limit, probeBatchSize)
			}
			items := l.take(limit)
			if len(items) == 0 {
				d.circuit.abandon(t)
				<-d.slots
				continue
			}
			d.dispatch(newStreamBatch(l, items), t, time.Now())
		}
	}
}

// dropQueued drops every queued and held event of ss: the session is
// over, and its unconfirmed transactions will be read again.
func (s *streamSource) dropQueued(ss *session) {
	s.mu.Lock()
	lanes := s.laneList()
	s.mu.Unlock()
	for _, l := range lanes {
		l.mu.Lock()
		gone := l.dropSessionLocked(ss)
		l.mu.Unlock()
		for _, it := range gone {
			s.drop(it)
		}
	}
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
		// key runs go in the order the stream read them (relay/ordered.go).
		it.ev.Row.Seq = it.seq
		b.rows[i] = &it.ev.Row
		b.byID[it.ev.Row.ID] = append(b.byID[it.ev.Row.ID], it)
	}
	return b
}

func (b *streamBatch) Rows() []*store.OutboxRow { return b.rows }

// Scope ends when the batch's session is lost: whatever is still
// unsent then stays so (an ordered batch stops between its waves), for
// the relay that holds the stream now. It checks for a pause first: a
// batch taken just before the process was stopped must not be sent when
// it resumes, before the pause watch has ticked.
func (b *streamBatch) Scope() context.Context {
	ss := b.items[0].s
	b.l.src.checkPause(ss)
	return ss.lostCtx
}

// settled is one event of a finished batch and its outcome.
type settled struct {
	it *streamItem
	fi store.OutboxFinishItem
}

// Finish marks the acked events done and sends the others to the table.
// It does not wait for their spills: the key states keep a key's later
// events behind them (relay/stream_keys.go), and a slow spill must not
// hold back the lane's other keys. The events of a session that
// was lost meanwhile are dropped instead: the relay that holds the stream
// now decides them.
func (b *streamBatch) Finish(items []store.OutboxFinishItem) finishReport {
	start := time.Now()
	l, src := b.l, b.l.src
	out := make([]settled, 0, len(b.items))
	for _, fi := range items {
		its := b.byID[fi.ID]
		if len(its) == 0 {
			continue
		}
		b.byID[fi.ID] = its[1:]
		out = append(out, settled{its[0], fi})
	}
	// An event the delivery gave no outcome would hold its transaction
	// (and the window) for ever: it goes to the table instead.
	for _, its := range b.byID {
		for _, it := range its {
			out = append(out, settled{it, store.OutboxFinishItem{ID: it.ev.Row.ID, Outcome: store.OutcomeReleased}})
		}
	}
	// Stream order: a key's failed event goes to the table before the
	// later ones of its key that it held back.
	slices.SortFunc(out, func(a, b settled) int { return cmp.Compare(a.it.seq, b.it.seq) })
	var acked, dropped []*streamItem
	l.mu.Lock()
	touched := map[string]*keyState{}
	for _, x := range out {
		key := x.it.ev.Row.Key
		if k := l.keys[key]; l.ordered && key != "" && k != nil {
			k.sending--
			touched[key] = k
		}
		switch {
		case x.it.s.lost():
			dropped = append(dropped, x.it)
		case x.fi.Outcome == store.OutcomeAcked:
			acked = append(acked, x.it)
		default:
			l.tableLocked(x.it, x.fi.Outcome, time.Now().Add(x.fi.RetryAfter), x.fi.Error)
		}
	}
	for key, k := range touched {
		// The key's events are settled: what waited for them goes on.
		if !b.items[0].s.lost() {
			l.flushHeldLocked(k)
		}
		l.forgetLocked(key, k)
	}
	l.mu.Unlock()
	for _, it := range acked {
		src.done(it, true)
	}
	for _, it := range dropped {
		src.drop(it)
	}
	return finishReport{took: time.Since(start), failedWhy: "spill failed", fencedWhy: "stream events not finished"}
}
