package relay

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// The spill writer (docs/concepts.md, "WAL mode"): the one writer of the
// stream's events into the outbox table. One FIFO keeps a key's spills in
// the order its lane queued them, which is stream order (keyState,
// relay/stream_lane.go); each spill transaction's rows take that
// transaction's xid, and the ordered claim orders a key by it, so the
// table delivers a key's spilled events in stream order.
//
// Nothing may pin the slot: a group of spills the database refuses is
// split until the event at fault stands alone, which is then
// dead-lettered in a form the table accepts; only a database that cannot
// be reached is waited for.

// spillJob is one event on its way into the outbox table.
type spillJob struct {
	it   *streamItem
	item store.StreamSpillItem
	// refused counts the database's refusals of this event alone: the
	// first turns it into its dead-letter form (deadLetterForm), the
	// second into its bare form.
	refused int
	written bool
}

func spillWork(it *streamItem, o store.Outcome, due time.Time, errText string) *spillJob {
	attempts := it.ev.Row.Attempts
	if o == store.OutcomeRetry || o == store.OutcomeFailed {
		attempts++
	}
	return &spillJob{it: it, item: store.StreamSpillItem{Event: it.ev, Outcome: o, Attempts: attempts, DueAt: due, Error: errText}}
}

// spillReq is one group of spills for the spill writer.
type spillReq struct {
	work []*spillJob
}

// enqueueSpill queues work for the spill writer. It never blocks: what
// waits here is held in the window like any event between reading and
// confirming, so the queue is bounded by it.
//
// Once the writer has ended (the stop deadline passed while batches were
// still in flight, and a cancelled batch sends its events to the table
// only now), nothing more is written: the events stay unconfirmed, and
// the stream delivers them again. They are settled on a goroutine of
// their own, since the caller may hold its lane's lock (spillSettled
// takes it). Before, they waited for a writer that was gone, and the
// stop waited for them for ever.
func (s *streamSource) enqueueSpill(work []*spillJob) {
	req := &spillReq{work: work}
	s.spillMu.Lock()
	if s.spillClosed {
		s.spillMu.Unlock()
		s.env.life.Go(func() { s.settleSpills(work) }) // a goroutine of the lifetime: End waits for it
		return
	}
	s.spillq = append(s.spillq, req)
	s.spillMu.Unlock()
	select {
	case s.spillWake <- struct{}{}:
	default:
	}
}

// maxSpillGroup bounds the events of one spill statement.
const maxSpillGroup = 500

// spillWriter writes the spills in the order they were queued, folding
// the queued groups into one statement. It runs until the relay's
// goroutines are done with it: it stops after the hard stop.
func (s *streamSource) spillWriter() {
	errs := backoff.Streak{Policy: errorBackoff}
	for {
		reqs := s.nextSpills()
		if reqs == nil {
			return
		}
		s.writeSpills(reqs, &errs)
	}
}

// takeSpills takes queued requests, up to maxSpillGroup events (at least
// one request).
func (s *streamSource) takeSpills() []*spillReq {
	s.spillMu.Lock()
	defer s.spillMu.Unlock()
	n, i := 0, 0
	for i < len(s.spillq) && (i == 0 || n+len(s.spillq[i].work) <= maxSpillGroup) {
		n += len(s.spillq[i].work)
		i++
	}
	reqs := s.spillq[:i:i]
	s.spillq = s.spillq[i:]
	if len(s.spillq) == 0 {
		s.spillq = nil
	}
	return reqs
}

// takeSpillsOrClose takes queued requests as takeSpills does; when none
// are queued it closes the queue (spillClosed) and returns nil.
func (s *streamSource) takeSpillsOrClose() []*spillReq {
	s.spillMu.Lock()
	empty := len(s.spillq) == 0
	s.spillClosed = empty
	s.spillMu.Unlock()
	if empty {
		return nil
	}
	return s.takeSpills() // at least one: the writer is the only taker
}

// nextSpills waits for queued spills and takes them; nil once the relay
// stops and nothing more can be spilled.
func (s *streamSource) nextSpills() []*spillReq {
	for s.env.run.Err() == nil {
		if reqs := s.takeSpills(); len(reqs) > 0 {
			return reqs
		}
		select {
		case <-s.spillWake:
		case <-s.env.run.Done():
		}
	}
	// Stop began: keep writing while the batches in flight finish. When no
	// session holds events, nothing more can be spilled; when the hard
	// deadline has passed, the batches still in flight are cut short, and
	// what they spill late is settled unwritten (enqueueSpill). Either way
	// the queue closes once it is empty.
	t := time.NewTicker(10 * time.Millisecond)
	defer t.Stop()
	for {
		if reqs := s.takeSpills(); len(reqs) > 0 {
			return reqs
		}
		if n, _ := s.window.held(); n == 0 || s.env.hard.Err() != nil {
			return s.takeSpillsOrClose()
		}
		select {
		case <-s.spillWake:
		case <-t.C:
		}
	}
}

// writeSpills writes one group of spills and settles each event: done
// once durable, dropped (unconfirmed, the stream delivers it again) when
// its session was lost or the stop deadline passed.
func (s *streamSource) writeSpills(reqs []*spillReq, errs *backoff.Streak) {
	var jobs []*spillJob
	for _, r := range reqs {
		jobs = append(jobs, r.work...)
	}
	s.writeGroup(s.dropLost(jobs), errs)
	written, failed := 0, false
	for _, j := range jobs {
		if j.written {
			written++
			failed = failed || j.item.Outcome == store.OutcomeFailed
		}
	}
	if written > 0 {
		s.mu.Lock()
		s.health.Spilled += int64(written)
		s.mu.Unlock()
	}
	if failed {
		// The mover takes FAILED rows to the dead-letter table, where an
		// ordered key is parked: now, not at its next backed-off round.
		s.env.deadLettered()
	}
	s.settleSpills(jobs)
}

// settleSpills settles each job's event: done once its spill is written
// (durable), dropped otherwise (unconfirmed: the stream delivers it
// again).
func (s *streamSource) settleSpills(jobs []*spillJob) {
	for _, j := range jobs {
		if j.it.l != nil {
			j.it.l.spillSettled(j.it, j.written)
		}
		if j.written {
			s.done(j.it, false)
		} else {
			s.drop(j.it)
		}
	}
}

// writeGroup writes jobs, in order, and marks the written ones. A group
// the database refuses (store.ErrDataRefused, store.ErrInvalidParams) is
// split in halves, written one after the other, until the event at fault
// stands alone; that one is written in its dead-letter form, then in its
// bare form (deadLetterForm). Any other failure (the database cannot be
// reached) is retried with backoff until the write lands, the jobs'
// session is lost, or the stop deadline passes. It returns false when it
// gave up: the caller drops what is not written.
func (s *streamSource) writeGroup(jobs []*spillJob, errs *backoff.Streak) bool {
	if len(jobs) == 0 {
		return true
	}
	for {
		items := make([]*store.StreamSpillItem, len(jobs))
		for i, j := range jobs {
			items[i] = &j.item
		}
		ctx, cancel := context.WithTimeout(context.WithoutCancel(s.env.hard), finishTimeout)
		err := s.streamer.StreamSpill(ctx, items)
		cancel()
		if err == nil {
			errs.Reset()
			for _, j := range jobs {
				j.written = true
			}
			return true
		}
		if errors.Is(err, store.ErrDataRefused) || errors.Is(err, store.ErrInvalidParams) {
			if len(jobs) > 1 {
				h := len(jobs) / 2
				return s.writeGroup(jobs[:h], errs) && s.writeGroup(jobs[h:], errs)
			}
			if j := jobs[0]; j.refused < 2 {
				j.refused++
				s.log.Error("the database refused a spilled event; dead-lettering it in a form it accepts",
					slog.String("event_id", j.it.ev.Row.ID.String()), slog.String("event_type", j.it.ev.Row.EventType), slog.Any("error", err))
				j.deadLetterForm(err)
				continue
			}
		}
		if s.env.hard.Err() != nil {
			// Past the stop deadline: leave the events unconfirmed, the
			// stream delivers them again.
			s.log.Error("spill failed at the stop deadline; the events stay unconfirmed", slog.Int("events", len(jobs)), slog.Any("error", err))
			return false
		}
		if jobs = s.dropLost(jobs); len(jobs) == 0 {
			return true
		}
		wait := errs.Next()
		s.log.Warn("spill failed; retrying", slog.Int("events", len(jobs)), slog.Any("error", err), slog.Duration("retry_in", wait))
		s.sleep(context.WithoutCancel(s.env.hard), wait)
	}
}

// deadLetterForm turns the event into a FAILED row the table accepts,
// after the database refused it as it was: first its text sanitized and
// its headers kept only where they are valid text, then (refused again)
// its bare form: the undecodable type, no key, no headers, the payload
// as it was. Either way the error says why, and the payload, the id and
// the attempts are kept.
func (j *spillJob) deadLetterForm(refusal error) {
	ev := *j.it.ev
	row := &ev.Row
	why := store.NotSentPrefix + "the database refused the event as it was (" + errorText(refusal) + ")"
	if j.item.Error != "" {
		why += "; before that: " + j.item.Error
	}
	if j.refused == 1 {
		row.Key = store.SanitizeText(row.Key)
		if txbox.ValidateEventType(row.EventType) != nil {
			row.EventType = store.UndecodableEventType
		}
		h := make(map[string]string, len(row.Headers))
		for k, v := range maps.All(row.Headers) {
			h[store.SanitizeText(k)] = store.SanitizeText(v)
		}
		row.Headers = h
	} else {
		why = store.NotSentPrefix + "the database refused even the event's sanitized form; kept as bytes (" + errorText(refusal) + ")"
		row.EventType, row.Key, row.Headers = store.UndecodableEventType, "", nil
	}
	if len(why) > maxErrorText {
		why = errorText(errors.New(why))
	}
	j.item = store.StreamSpillItem{Event: &ev, Outcome: store.OutcomeFailed, Attempts: j.item.Attempts, DueAt: j.item.DueAt, Error: why}
}

// dropLost returns jobs without the ones of a lost session (a pause, a
// lost connection, the slot taken over: see lose), which it leaves
// unwritten: another relay likely streams their transactions again by
// now, and delivers or spills them itself. Written here, they would come
// back through the table poller as duplicates, and an ordered key's spill
// would reach the table after the new relay delivered later events of
// that key. It checks the pause itself, since the writer may run before
// pauseWatch's first late tick.
func (s *streamSource) dropLost(jobs []*spillJob) []*spillJob {
	s.mu.Lock()
	cur := s.cur
	s.mu.Unlock()
	if cur != nil {
		s.checkPause(cur)
	}
	keep := make([]*spillJob, 0, len(jobs))
	gone := 0
	for _, j := range jobs {
		if j.it.s.lost() {
			gone++
			continue
		}
		keep = append(keep, j)
	}
	if gone > 0 {
		s.log.Warn("the stream was lost; leaving its spills unwritten", slog.Int("events", gone))
	}
	return keep
}
