package relay

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/store"
)

// WAL mode's source of events (docs/concepts.md, "WAL mode"): one stream
// per relay reads committed transactions from the database's log
// (store.Streamer), hands each event to the lane of its type
// (relay/stream_lane.go), where it goes through the same send, judge and
// report path as a claimed row (relay/lane.go), and confirms a
// transaction once each of its events is acked, spilled into the outbox
// table or dead-lettered. The table pollers keep running beside it: they
// deliver what spilled, the rows that predate the stream, and events with
// a future not-before.

// slotRecreateTimeout bounds recreating a lost slot, which waits for the
// transactions open in the cluster.
const slotRecreateTimeout = time.Minute

// maxSpilledKeys bounds the (type, key) pairs with rows in the table that
// the stream remembers; past it a type sends every event to the table
// until a reload finds fewer, so memory stays bounded however many keys
// wait in the table.
const maxSpilledKeys = 100_000

// spilledKeysPage is the page of a reload of the table's keys.
const spilledKeysPage = 5_000

// defaultTableKeysReload is how often the keys with rows in the table are
// read again, to let keys whose rows are gone flow through the stream
// again.
const defaultTableKeysReload = 5 * time.Second

// maxConfirmIDs bounds the captured ids one confirm deletes.
const maxConfirmIDs = 5_000

// streamSource is the relay's stream: one session at a time, reopened
// after each failure, or standing by while another relay holds it.
type streamSource struct {
	env      sourceEnv
	cfg      StreamConfig
	streamer store.Streamer
	log      *slog.Logger

	// spillq is the queue of the one spill writer (relay/stream_spill.go),
	// spillWake its wake-up.
	spillMu   sync.Mutex
	spillq    []*spillReq
	spillWake chan struct{}
	// spillClosed is set when the writer ended (the stop deadline
	// passed): later spills are settled unwritten (enqueueSpill).
	spillClosed bool
	// reloadEvery is how often the table's keys are read again
	// (defaultTableKeysReload; shorter in tests).
	reloadEvery time.Duration
	// seq numbers the events in the order the stream read them.
	seq uint64
	// confirmRounds counts the confirm loop's rounds, so a test can wait
	// for rounds to pass instead of sleeping when it shows that a confirm
	// did not move.
	confirmRounds atomic.Uint64

	// window bounds the events between reading and confirming.
	window *holdWindow

	mu    sync.Mutex
	lanes map[laneKey]*streamLane
	// fan caches each type's fan-out route names (nil: the type has one
	// route), read by fanOut.
	fan    map[string][]string
	health StreamHealth
	// table is what the last reload found of the ordered types' keys
	// with rows in the table (relay/stream_lane.go, tableKeys).
	table tableKeys
	// txs are the current session's transactions not yet confirmed, in
	// stream order.
	txs []*streamTx
	// lastTick is when the pause watch last ran: a relay that was
	// stopped finds it old. cur is the open session.
	lastTick time.Time
	cur      *session
}

// streamTx is one transaction between reading and confirming.
type streamTx struct {
	end      uint64
	pending  int
	captured []txbox.ID
}

// streamItem is one event between reading and confirming.
type streamItem struct {
	ev *store.StreamEvent
	tx *streamTx
	s  *session
	// l is the lane of the event's type, nil for an event no lane takes
	// (an undecodable one); seq its place in the order the stream read
	// the events; spill its spill once it is bound for the table.
	l     *streamLane
	seq   uint64
	spill *spillJob
}

// newStreamSource makes the WAL source of streamer; cfg has its
// defaults (StreamConfig.withDefaults).
func newStreamSource(env sourceEnv, cfg StreamConfig, streamer store.Streamer) *streamSource {
	return &streamSource{
		env: env, cfg: cfg, streamer: streamer,
		log:         env.log.With(slog.String("source", "stream")),
		spillWake:   make(chan struct{}, 1),
		reloadEvery: cmp.Or(cfg.tableKeysReload, defaultTableKeysReload),
		window:      newHoldWindow(cfg.Window, cfg.WindowBytes),
		lanes:       map[laneKey]*streamLane{},
		fan:         map[string][]string{},
		table:       tableKeys{keys: map[store.StreamKey]struct{}{}, overflow: map[string]bool{}},
		lastTick:    time.Now(),
	}
}

// start runs the stream's goroutines; Stop ends them.
func (s *streamSource) start() {
	s.setState(StreamStarting, "")
	for _, f := range []func(){s.runSessions, s.spillWriter, s.pauseWatch, s.statusPoll} {
		s.env.life.Go(f)
	}
}

// runSessions opens the stream, streams until the session fails, and
// opens it again; while another relay holds it, it stands by.
func (s *streamSource) runSessions() {
	ctx := s.env.run
	errs := newDBRetry()
	for ctx.Err() == nil {
		st, err := s.streamer.OpenStream(ctx, &store.StreamOptions{StatusInterval: s.cfg.StatusInterval, Window: s.cfg.Window})
		switch {
		case err == nil:
		case errors.Is(err, store.ErrStreamBusy):
			s.setState(StreamStandby, "")
			errs.reset()
			s.sleep(ctx, jitter(s.cfg.StandbyInterval))
			continue
		default:
			if ctx.Err() != nil {
				return
			}
			if errors.Is(err, store.ErrStreamLost) && s.cfg.OnSlotLost == SlotLostRecreate && s.recreate(ctx) {
				errs.reset()
				continue
			}
			wait := errs.next(err)
			lvl := slog.LevelWarn
			if errors.Is(err, store.ErrStreamLost) {
				lvl = slog.LevelError
			}
			s.log.Log(ctx, lvl, "cannot open the stream; retrying", slog.Any("error", err), slog.Duration("retry_in", wait))
			s.setState(StreamFailing, err.Error())
			s.sleep(ctx, wait)
			continue
		}
		errs.reset()
		s.setState(StreamStreaming, "")
		s.log.Info("streaming")
		if err := s.stream(ctx, st); err != nil && ctx.Err() == nil {
			s.log.Warn("stream ended; reopening", slog.Any("error", err))
			s.setState(StreamFailing, err.Error())
			s.sleep(ctx, errs.next(err))
		}
	}
}

// recreate makes a new slot for one the database lost, and reports
// whether it did (nothing to recreate, or a failure, leaves the open
// error to stand).
func (s *streamSource) recreate(ctx context.Context) bool {
	rctx, cancel := context.WithTimeout(ctx, slotRecreateTimeout)
	defer cancel()
	loss, err := s.streamer.StreamRecreate(rctx, slotRecreateTimeout-5*time.Second)
	if err != nil {
		s.log.Warn("cannot recreate the lost slot; retrying", slog.Any("error", err))
		return false
	}
	if loss == nil {
		return false
	}
	s.mu.Lock()
	s.health.SlotRecreations++
	s.health.LastLoss = loss
	s.mu.Unlock()
	attrs := []any{slog.String("slot", loss.Slot), slog.String("reason", loss.Reason),
		slog.String("lost_from_lsn", formatLSN(loss.From)), slog.String("lost_to_lsn", formatLSN(loss.To))}
	if !loss.LastConfirm.IsZero() {
		attrs = append(attrs, slog.Time("last_confirm", loss.LastConfirm))
	}
	if loss.To > loss.From {
		attrs = append(attrs, slog.Uint64("lost_wal_bytes", loss.To-loss.From))
	}
	s.log.Error("the database lost the slot; a new one was made and delivery goes on: the events emitted between lost_from_lsn and lost_to_lsn "+
		"(after the last confirm) cannot be recovered from the WAL, compare them with the producers' records; rows in the outbox table are delivered "+
		"(docs/operations.md, Failover)", attrs...)
	return true
}

// formatLSN writes a log position as PostgreSQL does (16/B374D848).
func formatLSN(lsn uint64) string { return fmt.Sprintf("%X/%X", lsn>>32, uint32(lsn)) }

func (s *streamSource) sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// jitter is d ± 20%.
func jitter(d time.Duration) time.Duration {
	return d - d/5 + time.Duration(rand.Int64N(int64(d)*2/5+1))
}

// session is one open stream.
type session struct {
	st store.Stream
	// ctx ends when the session must stop reading: a failure, a loss, or
	// the relay's stop.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// lostCtx ends only when the session is lost (lose): the relay may no
	// longer hold the stream, so nothing of the session is sent, spilled
	// or confirmed any more. A stop is not a loss: the batches in flight
	// then finish and what they did is confirmed.
	lostCtx context.Context
	lostFn  context.CancelCauseFunc
	// work counts the session's events between reading and done.
	work sync.WaitGroup
	// started is when the session opened.
	started time.Time
}

// lost reports whether the session was lost.
func (ss *session) lost() bool { return ss.lostCtx.Err() != nil }

// errPaused ends a session after the relay was stopped for longer than
// PauseLimit.
var errPaused = errors.New("relay: the process was paused; another relay may hold the stream now")

// errTakenOver ends a session whose slot is streamed by another process.
var errTakenOver = errors.New("relay: another process streams the slot now")

// stream runs one session: reads transactions into the lanes, confirms
// them as they are done, and on the session's end waits for the events in
// flight and confirms what is done. Any end but the relay's stop loses
// the session (lose).
func (s *streamSource) stream(ctx context.Context, st store.Stream) error {
	sctx, cancel := context.WithCancelCause(ctx)
	lctx, lose := context.WithCancelCause(context.Background())
	ss := &session{st: st, ctx: sctx, cancel: cancel, lostCtx: lctx, lostFn: lose, started: time.Now()}
	defer lose(nil)
	s.mu.Lock()
	s.cur = ss
	s.lastTick = time.Now()
	s.mu.Unlock()
	if err := s.reloadTableKeys(sctx); err != nil {
		cancel(err)
		s.endSession(ss)
		_ = st.Close(context.WithoutCancel(ctx))
		return err
	}
	confirmDone := make(chan struct{})
	go func() {
		defer close(confirmDone)
		s.confirmLoop(ss)
	}()
	err := s.read(ss)
	if ctx.Err() == nil {
		s.lose(ss, err)
	}
	cancel(err)
	s.dropQueued(ss)
	ss.work.Wait() // the batches in flight finish (or spill, or drop)
	<-confirmDone
	if !ss.lost() {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(s.env.hard), finishTimeout)
		if err := s.confirm(cctx, ss, true); err != nil {
			s.log.Warn("final confirm failed; the unconfirmed transactions will be read again", slog.Any("error", err))
		}
		ccancel()
	}
	lostCause := context.Cause(ss.lostCtx)
	s.endSession(ss)
	_ = st.Close(context.WithoutCancel(ctx))
	if lostCause != nil {
		return lostCause
	}
	return err
}

// endSession forgets ss as the current session.
func (s *streamSource) endSession(ss *session) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.txs = nil
	if s.cur == ss {
		s.cur = nil
	}
}

// read hands the session's transactions to the lanes until it fails.
func (s *streamSource) read(ss *session) error {
	for {
		tx, err := ss.st.Next(ss.ctx)
		if err != nil {
			if cause := context.Cause(ss.ctx); cause != nil {
				return cause
			}
			return err
		}
		if len(tx.Events) == 0 {
			continue
		}
		// A fanned-out type's event is one item per route (fanOut): the
		// transaction is pending until each of them is done, and each
		// holds its place in the window, taken as it is handed out (all
		// at once could exceed a window smaller than the routes).
		copies := make([][]*store.StreamEvent, len(tx.Events))
		t := &streamTx{end: tx.End}
		for i, ev := range tx.Events {
			copies[i] = s.fanOut(ev)
			t.pending += len(copies[i])
		}
		s.mu.Lock()
		s.txs = append(s.txs, t)
		s.mu.Unlock()
		for _, evs := range copies {
			for _, ev := range evs {
				if err := s.window.acquire(ss.ctx, eventSize(ev)); err != nil {
					return err
				}
				ss.work.Add(1)
				s.seq++
				s.route(&streamItem{ev: ev, tx: t, s: ss, seq: s.seq})
			}
		}
	}
}

// fanOut is ev as the lanes take it: ev itself for a type with one
// route, else one copy per route of the type, in the routes' order, as
// the table's expander would make them (store.Expander): the copy for
// route i has the route's name, the id store.RouteRowID(id, i), and for
// i > 0 the event id as EventID. So each route's message carries the
// event id as its id and the copy's id as its delivery id, and a copy
// that spills becomes the route's row, which the route's poller
// delivers. A captured row is the first route's copy only: it spills in
// place, and Confirm deletes it once that copy is acked; the other
// routes' copies are new rows. An event that names a route already (a
// captured row a producer routed itself) goes to that route's lane only.
func (s *streamSource) fanOut(ev *store.StreamEvent) []*store.StreamEvent {
	one := []*store.StreamEvent{ev}
	if ev.Row.Route != "" || txbox.ValidateEventType(ev.Row.EventType) != nil {
		return one
	}
	routes := s.routeNames(ev.Row.EventType)
	if len(routes) < 2 {
		return one
	}
	id := ev.Row.ID
	out := make([]*store.StreamEvent, len(routes))
	for i, r := range routes {
		c := *ev
		c.Row.Route = r
		if i > 0 {
			c.Row.ID, c.Row.EventID, c.Captured = store.RouteRowID(id, i), id, false
		}
		out[i] = &c
	}
	return out
}

// routeNames are the fan-out route names of eventType, nil when it has
// one route or its routes cannot be resolved (its events then go to the
// table with route "", where the expander makes the route rows).
func (s *streamSource) routeNames(eventType string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if names, ok := s.fan[eventType]; ok {
		return names
	}
	var names []string
	if s.env.routesFor != nil {
		routes, err := s.env.routesFor(eventType)
		if err != nil {
			s.log.Warn("cannot resolve the fan-out routes of the event type; its events go to the table", slog.String("event_type", eventType), slog.Any("error", err))
			names = []string{}
		}
		for _, r := range routes {
			names = append(names, r.routeName)
		}
	}
	s.fan[eventType] = names
	return names
}

// route hands one event to its type's lane, or sends it to the table: an
// event that cannot be a message is dead-lettered (on an ordered type
// behind its key's earlier events), an event with a future not-before is
// the poller's when it is due (its key waits behind it), and an event of
// a type with no settings is the poller's at once.
func (s *streamSource) route(it *streamItem) {
	ev := it.ev
	if ev.Row.Invalid == "" {
		if err := txbox.ValidateEventType(ev.Row.EventType); err != nil {
			ev.Row.Invalid = err.Error()
		}
	}
	if ev.Row.Invalid != "" && txbox.ValidateEventType(ev.Row.EventType) != nil {
		// Not even its type is known: it is kept as bytes under the
		// undecodable type, with no key to order it by.
		ev.Row.EventType, ev.Row.Key = store.UndecodableEventType, ""
	}
	if ev.Row.EventType != store.UndecodableEventType {
		l, err := s.lane(ev.Row.EventType, ev.Row.Route)
		if err != nil {
			s.log.Warn("no lane for the event type; spilled for the poller", slog.String("event_type", ev.Row.EventType), slog.String("route", ev.Row.Route), slog.Any("error", err))
		}
		it.l = l
	}
	l := it.l
	switch {
	case ev.Row.Invalid != "":
		why := store.NotSentPrefix + "the event cannot be turned into a message: " + ev.Row.Invalid
		s.log.Warn("stream event cannot be turned into a message; dead-lettering it", slog.String("event_id", ev.Row.ID.String()),
			slog.String("event_type", ev.Row.EventType), slog.String("reason", ev.Row.Invalid))
		if l == nil {
			s.enqueueSpill([]*spillJob{spillWork(it, store.OutcomeFailed, time.Time{}, why)})
			return
		}
		l.toTable(it, store.OutcomeFailed, time.Time{}, why)
	case !ev.NotBefore.IsZero() && ev.NotBefore.After(time.Now()):
		if l == nil {
			s.enqueueSpill([]*spillJob{spillWork(it, store.OutcomeReleased, ev.NotBefore, "")})
			return
		}
		l.toTable(it, store.OutcomeReleased, ev.NotBefore, "")
	case l == nil:
		s.enqueueSpill([]*spillJob{spillWork(it, store.OutcomeReleased, time.Now(), "")})
	case !l.push(it.s.ctx, it):
		s.drop(it) // the session is over: the stream reads it again
	}
}

// done records that one event is acked, spilled or dead-lettered.
func (s *streamSource) done(it *streamItem, acked bool) {
	s.mu.Lock()
	it.tx.pending--
	if acked && it.ev.Captured {
		it.tx.captured = append(it.tx.captured, it.ev.Row.ID)
	}
	s.mu.Unlock()
	s.window.release(eventSize(it.ev))
	it.s.work.Done()
}

// drop lets go of an event without finishing it: its transaction is not
// confirmed, so the stream delivers it again.
func (s *streamSource) drop(it *streamItem) {
	if it.s.lost() {
		s.mu.Lock()
		s.health.Dropped++
		s.mu.Unlock()
	}
	s.window.release(eventSize(it.ev))
	it.s.work.Done()
}

// eventSize is what an event costs the window: its payload and headers.
func eventSize(ev *store.StreamEvent) int64 {
	n := len(ev.Row.Payload) + len(ev.Row.Key) + len(ev.Row.EventType)
	for k, v := range ev.Row.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// confirmLoop confirms the done transactions every ConfirmInterval, and
// reloads the table's keys now and then.
func (s *streamSource) confirmLoop(ss *session) {
	t := time.NewTicker(s.cfg.ConfirmInterval)
	defer t.Stop()
	lastReload := time.Now()
	for {
		select {
		case <-ss.ctx.Done():
			return
		case <-t.C:
		}
		if !s.checkPause(ss) {
			return
		}
		if err := s.confirm(ss.ctx, ss, false); err != nil {
			s.lose(ss, err)
			return
		}
		s.confirmRounds.Add(1)
		if time.Since(lastReload) > s.reloadEvery {
			lastReload = time.Now()
			if err := s.reloadTableKeys(ss.ctx); err != nil && ss.ctx.Err() == nil {
				s.log.Warn("cannot reload the keys with rows in the table; keeping the ones known", slog.Any("error", err))
			}
		}
	}
}

// confirm confirms the longest prefix of done transactions (all of it
// when final). It returns the confirm's error.
func (s *streamSource) confirm(ctx context.Context, ss *session, final bool) error {
	for {
		if ss.lost() {
			return nil
		}
		s.mu.Lock()
		n, ids := 0, []txbox.ID(nil)
		for n < len(s.txs) && s.txs[n].pending == 0 && len(ids) < maxConfirmIDs {
			ids = append(ids, s.txs[n].captured...)
			n++
		}
		if n == 0 {
			s.mu.Unlock()
			return nil
		}
		end := s.txs[n-1].end
		s.mu.Unlock()
		if err := ss.st.Confirm(ctx, end, ids); err != nil {
			return err
		}
		s.mu.Lock()
		s.txs = s.txs[n:]
		s.health.LastConfirm, s.health.Confirmed = time.Now(), end
		more := len(s.txs) > 0 && s.txs[0].pending == 0
		s.mu.Unlock()
		if !more || (!final && len(ids) < maxConfirmIDs) {
			return nil
		}
	}
}

// pauseWatch notices that the process was stopped (SIGSTOP): its tick
// comes late. The server has then likely given the stream to another
// relay, so the session is lost.
func (s *streamSource) pauseWatch() {
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.env.run.Done():
			return
		case <-t.C:
			s.pauseTick()
		}
	}
}

// pauseTick is one tick of the pause watch. It loses the open session
// before it resets lastTick: reset first, a lane taking a batch between
// the two would find a fresh tick and a session not yet lost, and send
// what it held after the resume.
func (s *streamSource) pauseTick() {
	s.mu.Lock()
	gap := time.Since(s.lastTick)
	cur := s.cur
	s.mu.Unlock()
	if cur != nil && gap > s.cfg.PauseLimit {
		s.lose(cur, fmt.Errorf("%w (stopped for %s)", errPaused, gap.Round(time.Millisecond)))
	}
	s.mu.Lock()
	s.lastTick = time.Now()
	s.mu.Unlock()
}

// pausedFor is how long ago the pause watch last ran.
func (s *streamSource) pausedFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastTick)
}

// checkPause loses ss when the process was paused past PauseLimit; it
// reports whether ss may still send.
func (s *streamSource) checkPause(ss *session) bool {
	if d := s.pausedFor(); d > s.cfg.PauseLimit {
		s.lose(ss, fmt.Errorf("%w (stopped for %s)", errPaused, d.Round(time.Millisecond)))
	}
	return !ss.lost() && ss.ctx.Err() == nil
}

// lose ends ss as a session this relay may no longer hold: it was paused,
// its connection broke or went silent, a confirm failed, or another
// process streams the slot. Whatever it holds unsent is dropped (queued
// and held events, unwritten spills, the waves of an ordered batch not
// yet sent) and nothing more of it is confirmed: the relay that holds the
// stream now reads those transactions again and decides them. Only the
// sends already handed to the destination's client can still go out.
func (s *streamSource) lose(ss *session, cause error) {
	if cause == nil {
		cause = errors.New("relay: the stream ended")
	}
	s.mu.Lock()
	first := !ss.lost()
	if first {
		s.health.Losses++
		if errors.Is(cause, errPaused) {
			s.health.Pauses++
		}
		// The state changes with the count, under the same lock: a
		// health snapshot between the two once showed a lost session
		// still streaming.
		s.setStateLocked(StreamFailing, "lost the stream: "+cause.Error())
		ss.lostFn(cause)
	}
	s.mu.Unlock()
	ss.cancel(cause)
	if first {
		s.log.Warn("lost the stream; dropping the events it holds unsent and reopening", slog.Any("error", cause))
	}
}

// statusPoll reads the slot's health every StatusPoll.
func (s *streamSource) statusPoll() {
	t := time.NewTicker(s.cfg.StatusPoll)
	defer t.Stop()
	for {
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(s.env.run, 10*time.Second)
		st, err := s.streamer.StreamStatus(ctx)
		cancel()
		s.mu.Lock()
		s.health.SlotReadAt = time.Now()
		if err != nil {
			s.health.SlotErr = err.Error()
		} else {
			s.health.Slot, s.health.SlotErr = st, ""
			if st.LastLoss != nil && (s.health.LastLoss == nil || st.LastLoss.At.After(s.health.LastLoss.At)) {
				s.health.LastLoss = st.LastLoss
			}
			s.health.Lagging = s.cfg.LagThreshold > 0 && max(st.RestartLag, st.FlushLag) > s.cfg.LagThreshold
		}
		still := cur != nil && s.cur == cur
		s.mu.Unlock()
		if err == nil && still {
			s.checkHolder(cur, st)
		}
		select {
		case <-s.env.run.Done():
			return
		case <-t.C:
		}
	}
}

// checkHolder loses ss when the slot, read while ss was open, is not
// streamed by ss's own server process: another relay took it over (the
// server ended ss's side without this relay hearing of it, as when the
// link went silent), or nobody streams it (ss's server side is gone).
func (s *streamSource) checkHolder(ss *session, st *store.StreamStatus) {
	own := ss.st.ServerPID()
	switch {
	case ss.lost() || own == 0:
	case !st.Active:
		s.lose(ss, fmt.Errorf("%w: the slot %s is not streamed by anyone, not by this relay's server process %d", errTakenOver, st.Slot, own))
	case st.ActivePID != own:
		s.lose(ss, fmt.Errorf("%w: the slot %s is streamed by server process %d, not by this relay's %d", errTakenOver, st.Slot, st.ActivePID, own))
	}
}

// holdWindow bounds what the stream holds between reading and confirming,
// in events and in payload bytes: a backlog of any size, of any payload
// size, costs the relay at most the window (StreamConfig.Window and
// WindowBytes). One event larger than the byte bound is still let through
// when the window is empty, so it cannot block the stream for ever.
type holdWindow struct {
	maxEvents int
	maxBytes  int64

	mu     sync.Mutex
	events int
	bytes  int64
	// freed is closed (and replaced) when something is released while
	// readers wait (waiters of them): not on every release, which made a
	// channel per event in a drain.
	freed   chan struct{}
	waiters int
}

func newHoldWindow(maxEvents int, maxBytes int64) *holdWindow {
	return &holdWindow{maxEvents: maxEvents, maxBytes: maxBytes, freed: make(chan struct{})}
}

// acquire waits until an event of size bytes fits, or ctx ends.
func (w *holdWindow) acquire(ctx context.Context, size int64) error {
	for {
		w.mu.Lock()
		if w.events == 0 || (w.events < w.maxEvents && w.bytes+size <= w.maxBytes) {
			w.events++
			w.bytes += size
			w.mu.Unlock()
			return nil
		}
		freed := w.freed
		w.waiters++
		w.mu.Unlock()
		var err error
		select {
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-freed:
		}
		w.mu.Lock()
		w.waiters--
		w.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// release gives back one event of size bytes.
func (w *holdWindow) release(size int64) {
	w.mu.Lock()
	w.events--
	w.bytes -= size
	if w.waiters > 0 {
		close(w.freed)
		w.freed = make(chan struct{})
	}
	w.mu.Unlock()
}

// held is what the window holds now.
func (w *holdWindow) held() (events int, bytes int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events, w.bytes
}
