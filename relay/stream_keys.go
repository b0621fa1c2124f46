package relay

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/txbox/txbox/store"
)

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
