package relay

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// A lane holds one event type's (or fan-out route's) events from the stream until they are
// sent, and hands them in batches to the type's lane (relay/lane.go): the
// same send, judge and report path as a claimed batch, with the same
// circuit. Its batches (streamBatch) finish by
// marking events done, and by sending the ones not acked to the outbox
// table, where the table poller retries them with the usual backoff. On
// an ordered type every move of a key's events goes through the key's one
// state (keyState, below).

// ClaimStream is txbox.ClaimStream: the claim mode a WAL-mode lane shows
// in Health.Types.
//
// Deprecated: use txbox.ClaimStream.
const ClaimStream = txbox.ClaimStream

// streamLane is one event type's queue of stream events, or one fan-out
// route's.
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

// laneKey names a lane: an event type, and the fan-out route of a type
// that fans out ("" for any other type). Each route of a fanned-out type
// has a lane of its own, as in table mode (docs/concepts.md, "Fan-out"):
// a route that is down, slow or rejecting holds back only itself.
type laneKey struct {
	eventType, route string
}

// lane returns the lane of eventType's route ("" for a type with one
// route), making it (and its worker) on its first event.
func (s *streamSource) lane(eventType, route string) (*streamLane, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	lk := laneKey{eventType, route}
	if l, ok := s.lanes[lk]; ok {
		return l, nil
	}
	set, err := s.laneSettings(eventType, route)
	if err != nil {
		return nil, err
	}
	set.claim = txbox.ClaimStream
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
	s.lanes[lk] = l
	s.env.life.Go(l.run)
	return l, nil
}

// laneSettings resolves the settings of a lane: the type's own for a
// type with one route, else those of its route (an error for a route
// the type does not have, or for route "" of a type that fans out: such
// an event goes to the table, where the expander and the route pollers
// take it).
func (s *streamSource) laneSettings(eventType, route string) (*typeSettings, error) {
	var routes []*typeSettings
	if s.env.routesFor != nil {
		var err error
		if routes, err = s.env.routesFor(eventType); err != nil {
			return nil, err
		}
	}
	if len(routes) == 0 {
		if route != "" {
			return nil, fmt.Errorf("relay: event type %s does not fan out, and has no route %q", eventType, route)
		}
		return s.env.settingsFor(eventType)
	}
	for _, r := range routes {
		if r.routeName == route {
			return r, nil
		}
	}
	return nil, fmt.Errorf("relay: event type %s has no route %q", eventType, route)
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
			t, ok := d.acquire(ctx)
			if !ok {
				return
			}
			if !t.ok {
				l.tableAll(time.Now().Add(t.wait))
				continue
			}
			items := l.take(d.batchLimit(t))
			if len(items) == 0 {
				d.release(t)
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
// the relay that holds the stream now. Its Err checks for a pause first
// (pauseScope): a batch taken before the process was stopped must not be
// sent when it resumes, before the pause watch has ticked.
func (b *streamBatch) Scope() context.Context {
	ss := b.items[0].s
	return pauseScope{Context: ss.lostCtx, src: b.l.src, ss: ss}
}

// pauseScope is a stream batch's scope: its session's lostCtx, whose Err
// runs the pause check (streamSource.checkPause) before it answers. The
// lane asks Err right before the send (lane.sendWithinLease), so a pause
// anywhere between the batch's taking and that instant ends the scope
// there, whether or not the pause watch has ticked since the resume. One
// check per send, none per message.
type pauseScope struct {
	context.Context
	src *streamSource
	ss  *session
}

// Err loses the session if the process was paused past PauseLimit, then
// reports whether the session is lost.
func (p pauseScope) Err() error {
	p.src.checkPause(p.ss)
	return p.Context.Err()
}

// settled is one event of a finished batch and its outcome.
type settled struct {
	it *streamItem
	fi store.OutboxFinishItem
}

// Finish marks the acked events done and sends the others to the table.
// It does not wait for their spills: the key states keep a key's later
// events behind them (keyState), and a slow spill must not
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

// One state per key (docs/concepts.md, "WAL mode", "Order in WAL mode").
//
// An ordered type's key is in one place at a time: its events flow
// through the lane (queued, then sending), or they go to the outbox table
// behind rows the key already has there. Every decision about a key's
// next event reads the key's one record, keyState, under its lane's lock,
// so that no path (a full lane, a failed send, a deferred head, a dead
// letter, a reload of the table's keys) can hand a later event to the
// table or the destination while an earlier one can still fail:
//
//   - an event that goes to the table waits in held while events of its
//     key are being sent; when they settle (acked or spilled) it is
//     spilled after them, so the table receives a key's events in stream
//     order and the ordered claim, which orders a key by the spills'
//     transactions, delivers them in that order;
//   - a key that sends an event to the table moves its queued events
//     there first: they are earlier in the stream;
//   - a key stays bound for the table while a spill of it is queued or
//     being written, and after it is durable until a reload of the
//     table's keys that began after that proves its rows gone.

// keyState is what the stream source knows of one key of an ordered type.
// It lives in its lane's keys map while any of it is set, under the
// lane's lock.
type keyState struct {
	// queued counts the key's events in the lane's queue; sending those
	// in a batch being sent: they can still fail.
	queued, sending int
	// held are events bound for the table that wait for the key's
	// sending events to settle, in stream order.
	held []*streamItem
	// spilling counts the key's spills queued for the writer and not yet
	// durable.
	spilling int
	// durable is when the key's last spill became durable: a reload of
	// the table's keys that began before then may not have seen it.
	durable time.Time
}

// idleSince reports whether k holds nothing in memory and its last
// durable spill is older than since (a reload that began then saw it).
func (k *keyState) idleSince(since time.Time) bool {
	return k.queued == 0 && k.sending == 0 && len(k.held) == 0 && k.spilling == 0 && (k.durable.IsZero() || k.durable.Before(since))
}

// tableKeys is what the last reload of the table's keys found: the
// (type, key) pairs of ordered types with rows in the table (spilled,
// deferred, dead-lettered and unresolved) as of at, and the types with
// more such keys than maxSpilledKeys, which send every event to the
// table.
type tableKeys struct {
	at       time.Time
	keys     map[store.StreamKey]struct{}
	overflow map[string]bool
}

// keyLocked returns the state of key, making it; l.mu is held.
func (l *streamLane) keyLocked(key string) *keyState {
	k := l.keys[key]
	if k == nil {
		k = &keyState{}
		l.keys[key] = k
	}
	return k
}

// forgetLocked drops key's state once it holds nothing; l.mu is held.
func (l *streamLane) forgetLocked(key string, k *keyState) {
	if k.idleSince(l.src.tableKeysAt()) {
		delete(l.keys, key)
	}
}

// toTableLocked reports whether an ordered lane's event of key must go to
// the table: the key has rows there or on their way, or the type sends
// everything there; l.mu is held.
func (l *streamLane) toTableLocked(key string, k *keyState) bool {
	if k != nil && (len(k.held) > 0 || k.spilling > 0) {
		return true
	}
	inTable, at, overflow := l.src.inTable(l.lane.s.eventType, key)
	return overflow || inTable || (k != nil && !k.durable.IsZero() && !k.durable.Before(at))
}

// tableLocked sends it to the table: at once when nothing of its key can
// still fail, else after the key's sending events settle. On an ordered
// lane the key's queued events go first, in queue order: they are
// earlier in the stream. l.mu is held.
func (l *streamLane) tableLocked(it *streamItem, o store.Outcome, due time.Time, errText string) {
	it.spill = spillWork(it, o, due, errText)
	key := it.ev.Row.Key
	if !l.ordered || key == "" {
		l.src.enqueueSpill([]*spillJob{it.spill})
		return
	}
	k := l.keyLocked(key)
	if k.queued > 0 {
		l.unqueueKeyLocked(key, k)
	}
	// it is the key's latest event when it comes from the stream, but
	// its earliest when a finished batch sends it back: held stays in
	// stream order either way.
	k.held = append(k.held, it)
	slices.SortStableFunc(k.held, func(a, b *streamItem) int { return cmp.Compare(a.seq, b.seq) })
	l.flushHeldLocked(k)
}

// unqueueKeyLocked moves the queued events of key into its held list, in
// queue order, bound for the table; l.mu is held.
func (l *streamLane) unqueueKeyLocked(key string, k *keyState) {
	keep := l.queue[:0]
	for _, q := range l.queue {
		if q.ev.Row.Key == key {
			q.spill = spillWork(q, store.OutcomeReleased, time.Now(), "")
			k.held = append(k.held, q)
			continue
		}
		keep = append(keep, q)
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	k.queued = 0
	l.roomLocked()
}

// flushHeldLocked queues k's held events for the spill writer once none
// of k's events is being sent; l.mu is held.
func (l *streamLane) flushHeldLocked(k *keyState) {
	if k.sending > 0 || len(k.held) == 0 {
		return
	}
	jobs := make([]*spillJob, len(k.held))
	for i, it := range k.held {
		jobs[i] = it.spill
	}
	k.spilling += len(jobs)
	clear(k.held)
	k.held = k.held[:0]
	l.src.enqueueSpill(jobs)
}

// spillSettled records that the spill of it is durable (written) or was
// dropped unwritten.
func (l *streamLane) spillSettled(it *streamItem, written bool) {
	key := it.ev.Row.Key
	if !l.ordered || key == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.keys[key]
	if k == nil {
		return
	}
	k.spilling--
	if written {
		k.durable = time.Now()
		l.boundKeysLocked()
	}
	l.forgetLocked(key, k)
}

// dropSessionLocked lets go of the queued and held events of ss (the
// session is over: the stream reads them again) and returns them; l.mu
// is held.
func (l *streamLane) dropSessionLocked(ss *session) []*streamItem {
	var gone []*streamItem
	keep := l.queue[:0]
	for _, it := range l.queue {
		if it.s != ss {
			keep = append(keep, it)
			continue
		}
		gone = append(gone, it)
		if k := l.keys[it.ev.Row.Key]; l.ordered && k != nil {
			k.queued--
		}
	}
	clear(l.queue[len(keep):])
	l.queue = keep
	for key, k := range l.keys {
		held := k.held[:0]
		for _, it := range k.held {
			if it.s == ss {
				gone = append(gone, it)
			} else {
				held = append(held, it)
			}
		}
		clear(k.held[len(held):])
		k.held = held
		l.forgetLocked(key, k)
	}
	if len(gone) > 0 {
		l.roomLocked()
	}
	return gone
}

// inTable reports whether the last reload found rows of (eventType, key)
// in the table, when it began, and whether the type sends every event to
// the table.
func (s *streamSource) inTable(eventType, key string) (inTable bool, at time.Time, overflow bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.table.overflow[eventType] {
		return true, s.table.at, true
	}
	_, ok := s.table.keys[store.StreamKey{EventType: eventType, Key: key}]
	return ok, s.table.at, false
}

// tableKeysAt is when the last reload of the table's keys began.
func (s *streamSource) tableKeysAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.table.at
}

// reloadTableKeys reads the keys with rows in the table (store.Streamer.
// StreamSpilledKeys), a page at a time, and makes them the keys bound for
// the table. A key whose spill is queued, being written, or became
// durable after the reload began stays bound whatever the reload saw
// (keyState); a key the reload does not find, with nothing of it in
// memory, is free to flow through the stream again.
func (s *streamSource) reloadTableKeys(ctx context.Context) error {
	fresh := tableKeys{at: time.Now(), keys: map[store.StreamKey]struct{}{}, overflow: map[string]bool{}}
	var after *store.StreamKey
	for {
		keys, err := s.streamer.StreamSpilledKeys(ctx, after, spilledKeysPage)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if len(fresh.keys) >= maxSpilledKeys {
				fresh.overflow[k.EventType] = true
				continue
			}
			fresh.keys[k] = struct{}{}
		}
		if len(keys) < spilledKeysPage {
			break
		}
		last := keys[len(keys)-1]
		after = &last
	}
	s.mu.Lock()
	s.table = fresh
	lanes := s.laneList()
	s.mu.Unlock()
	for _, l := range lanes {
		l.pruneKeys()
	}
	return nil
}

// pruneKeys forgets the states that hold nothing since the last reload.
func (l *streamLane) pruneKeys() {
	if !l.ordered {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for key, k := range l.keys {
		l.forgetLocked(key, k)
	}
	l.boundKeysLocked()
}

// boundKeysLocked keeps the lane's key states within maxSpilledKeys: past
// it the type sends every event to the table until a reload finds fewer
// keys there, and the states that hold nothing in memory are forgotten,
// so memory stays bounded however many keys spill between two reloads;
// l.mu is held.
func (l *streamLane) boundKeysLocked() {
	if len(l.keys) <= maxSpilledKeys {
		return
	}
	l.src.mu.Lock()
	l.src.table.overflow[l.lane.s.eventType] = true
	l.src.mu.Unlock()
	for key, k := range l.keys {
		if k.queued == 0 && k.sending == 0 && len(k.held) == 0 && k.spilling == 0 {
			delete(l.keys, key)
		}
	}
}
