package relay

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// WAL mode's source of events (docs/concepts.md, "WAL mode"): one stream
// per relay reads committed transactions from the database's log
// (store.Streamer), hands each event to the lane of its type
// (relay/stream_lane.go), where it goes through the same send, judge and
// report path as a claimed row (relay/deliver.go), and confirms a
// transaction once each of its events is acked, spilled into the outbox
// table or dead-lettered. The table pollers keep running beside it: they
// deliver what spilled, the rows that predate the stream, and events with
// a future not-before.

// StreamConfig configures WAL mode's stream (Config.Stream).
type StreamConfig struct {
	// Enabled turns the stream on. The Store must be a store.Streamer.
	Enabled bool
	// Window bounds the events the stream holds between reading and
	// confirming, across all types: the relay's memory for a backlog of
	// any size. Defaults to DefaultStreamWindow.
	Window int
	// WindowBytes bounds the same in payload bytes (payloads, keys and
	// headers), so that large payloads do not multiply the window's
	// memory. Defaults to DefaultStreamWindowBytes.
	WindowBytes int64
	// LaneQueue bounds the events one type holds waiting for a send.
	// When a lane stays full for laneStall (100ms: its destination is
	// slower than the stream), the type's further events spill into the
	// outbox table until the lane has drained to half, instead of holding
	// back the other types; a lane that drains (a backlog) is waited for.
	// Defaults to DefaultStreamLaneQueue.
	LaneQueue int
	// BatchSize is the most events of one stream batch, for a type
	// whose batch-size is not set (in its Events entry or in Defaults):
	// with no claim to pay for, a batch only groups the sends, and a
	// larger one lets the stream run ahead of the destination's acks.
	// An explicit batch-size wins, and still sizes the type's claims of
	// spilled rows. Defaults to DefaultStreamBatchSize.
	BatchSize int
	// StatusInterval is how often the stream reports its position to the
	// server, whatever the relay is doing. Defaults to
	// DefaultStreamStatusInterval.
	StatusInterval time.Duration
	// StandbyInterval is how often a relay that finds the stream held by
	// another asks again (with 20% jitter). Defaults to
	// DefaultStreamStandbyInterval.
	StandbyInterval time.Duration
	// ConfirmInterval is the longest a done transaction waits to be
	// confirmed. Defaults to DefaultStreamConfirmInterval.
	ConfirmInterval time.Duration
	// PauseLimit is how long the relay may have been stopped (SIGSTOP, a
	// frozen VM) before it assumes the server gave its stream to another
	// relay: it then drops what it holds unsent and reopens, instead of
	// sending events another relay is sending too. Set it below the
	// server's wal_sender_timeout. Defaults to DefaultStreamPauseLimit.
	PauseLimit time.Duration
	// StatusPoll is how often the relay reads the slot's health (lag,
	// WAL status) for Health. Defaults to DefaultStreamStatusPoll.
	StatusPoll time.Duration
	// LagThreshold turns Health degraded when the slot pins more WAL
	// than this many bytes (restart or confirmed-flush distance).
	// Defaults to DefaultStreamLagThreshold; negative turns the check
	// off.
	LagThreshold int64
}

// Defaults of StreamConfig.
const (
	DefaultStreamWindow          = 20_000
	DefaultStreamWindowBytes     = 64 << 20
	DefaultStreamLaneQueue       = 5_000
	DefaultStreamBatchSize       = 1_000
	DefaultStreamStatusInterval  = time.Second
	DefaultStreamStandbyInterval = time.Second
	DefaultStreamConfirmInterval = 50 * time.Millisecond
	DefaultStreamPauseLimit      = 5 * time.Second
	DefaultStreamStatusPoll      = 10 * time.Second
	DefaultStreamLagThreshold    = 1 << 30
)

func (c StreamConfig) withDefaults() StreamConfig {
	if c.Window == 0 {
		c.Window = DefaultStreamWindow
	}
	if c.WindowBytes == 0 {
		c.WindowBytes = DefaultStreamWindowBytes
	}
	if c.LaneQueue == 0 {
		c.LaneQueue = DefaultStreamLaneQueue
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultStreamBatchSize
	}
	if c.StatusInterval == 0 {
		c.StatusInterval = DefaultStreamStatusInterval
	}
	if c.StandbyInterval == 0 {
		c.StandbyInterval = DefaultStreamStandbyInterval
	}
	if c.ConfirmInterval == 0 {
		c.ConfirmInterval = DefaultStreamConfirmInterval
	}
	if c.PauseLimit == 0 {
		c.PauseLimit = DefaultStreamPauseLimit
	}
	if c.StatusPoll == 0 {
		c.StatusPoll = DefaultStreamStatusPoll
	}
	if c.LagThreshold == 0 {
		c.LagThreshold = DefaultStreamLagThreshold
	}
	return c
}

// maxSpilledKeys bounds the (type, key) pairs an ordered type remembers
// as spilled; past it the whole type spills until a reload finds fewer,
// so memory stays bounded however many keys wait in the table.
const maxSpilledKeys = 100_000

// spilledKeysPage is the page of a spilled-keys reload.
const spilledKeysPage = 5_000

// spilledKeysReload is how often the spilled keys are read again, to let
// keys whose spilled rows are gone flow through the stream again.
const spilledKeysReload = 5 * time.Second

// maxConfirmIDs bounds the captured ids one confirm deletes.
const maxConfirmIDs = 5_000

// StreamState is what a relay's stream is doing.
type StreamState string

// The states of StreamHealth.State.
const (
	StreamOff       StreamState = ""
	StreamStarting  StreamState = "starting"
	StreamStreaming StreamState = "streaming"
	StreamStandby   StreamState = "standby"
	StreamFailing   StreamState = "failing"
)

// StreamHealth is the stream's part of Health.
type StreamHealth struct {
	State StreamState
	// Since is when the stream entered State.
	Since time.Time
	// LastConfirm is when this relay last confirmed a position;
	// Confirmed is that position (an LSN on PostgreSQL).
	LastConfirm time.Time
	Confirmed   uint64
	// Held is how many events the stream holds between reading and
	// confirming, HeldBytes their size; Transactions how many
	// transactions.
	Held, Transactions int
	HeldBytes          int64
	// Spilled counts the events this relay spilled into the outbox
	// table since it started.
	Spilled int64
	// Pauses counts the times this relay found it had been stopped
	// (SIGSTOP, a frozen VM) past StreamConfig.PauseLimit and ended its
	// session; PauseDropped the events it then let go of unsent and
	// unspilled, for the relay that took the stream over to deliver.
	Pauses, PauseDropped int64
	LastError            string
	// Slot is the last reading of the slot's health, nil before the
	// first; SlotReadAt is when it was read, SlotErr why it could not be.
	Slot       *store.StreamStatus
	SlotReadAt time.Time
	SlotErr    string
	// Lagging is true when the slot pins more WAL than the threshold
	// (StreamConfig.LagThreshold).
	Lagging bool
}

// streamSource is the relay's stream: one session at a time, reopened
// after each failure, or standing by while another relay holds it.
type streamSource struct {
	r        *Relay
	cfg      StreamConfig
	streamer store.Streamer
	log      *slog.Logger

	// spills is the one writer of spills: a single FIFO keeps a key's
	// spills in stream order, which the ordered claim's (txid, id) order
	// then keeps.
	spills chan *spillReq

	// window bounds the events between reading and confirming.
	window *holdWindow

	mu     sync.Mutex
	lanes  map[string]*streamLane
	health StreamHealth
	// spilled are the (type, key) pairs of ordered types whose later
	// events must spill behind rows already in the table, with the time
	// each was last marked; overflow holds the ordered types that spill
	// every event (more keys than maxSpilledKeys).
	spilled  map[store.StreamKey]time.Time
	overflow map[string]bool
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

// streamItem is one event in a lane.
type streamItem struct {
	ev *store.StreamEvent
	tx *streamTx
	s  *session
}

func newStreamSource(r *Relay, streamer store.Streamer) *streamSource {
	cfg := r.cfg.Stream.withDefaults()
	return &streamSource{
		r: r, cfg: cfg, streamer: streamer,
		log:      r.log.With(slog.String("source", "stream")),
		spills:   make(chan *spillReq, 64),
		window:   newHoldWindow(cfg.Window, cfg.WindowBytes),
		lanes:    map[string]*streamLane{},
		spilled:  map[store.StreamKey]time.Time{},
		overflow: map[string]bool{},
		lastTick: time.Now(),
	}
}

// start runs the stream's goroutines; Stop ends them.
func (s *streamSource) start() {
	s.setState(StreamStarting, "")
	s.r.wg.Add(4)
	go s.runSessions()
	go s.spillWriter()
	go s.pauseWatch()
	go s.statusPoll()
}

func (s *streamSource) setState(st StreamState, lastErr string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.health.State != st {
		s.health.State, s.health.Since = st, time.Now()
	}
	if lastErr != "" || st == StreamStreaming {
		s.health.LastError = lastErr
	}
}

// healthSnapshot is the stream's part of Relay.Health.
func (s *streamSource) healthSnapshot() *StreamHealth {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.health
	h.Held, h.HeldBytes = s.window.held()
	h.Transactions = len(s.txs)
	return &h
}

// runSessions opens the stream, streams until the session fails, and
// opens it again; while another relay holds it, it stands by.
func (s *streamSource) runSessions() {
	defer s.r.wg.Done()
	ctx := s.r.runCtx
	errs := backoff.Streak{Policy: errorBackoff}
	for ctx.Err() == nil {
		st, err := s.streamer.OpenStream(ctx, &store.StreamOptions{StatusInterval: s.cfg.StatusInterval, Window: s.cfg.Window})
		switch {
		case err == nil:
		case errors.Is(err, store.ErrStreamBusy):
			s.setState(StreamStandby, "")
			errs.Reset()
			s.sleep(ctx, jitter(s.cfg.StandbyInterval))
			continue
		default:
			if ctx.Err() != nil {
				return
			}
			wait := errs.Next()
			lvl := slog.LevelWarn
			if errors.Is(err, store.ErrStreamLost) {
				lvl = slog.LevelError
			}
			s.log.Log(ctx, lvl, "cannot open the stream; retrying", slog.Any("error", err), slog.Duration("retry_in", wait))
			s.setState(StreamFailing, err.Error())
			s.sleep(ctx, wait)
			continue
		}
		errs.Reset()
		s.setState(StreamStreaming, "")
		s.log.Info("streaming")
		if err := s.stream(ctx, st); err != nil && ctx.Err() == nil {
			s.log.Warn("stream ended; reopening", slog.Any("error", err))
			s.setState(StreamFailing, err.Error())
			s.sleep(ctx, errs.Next())
		}
	}
}

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
	// ctx ends when the session must stop sending: a failure, a pause,
	// or the relay's stop.
	ctx    context.Context
	cancel context.CancelCauseFunc
	// work counts the session's events between reading and done.
	work sync.WaitGroup
	// paused is set when the relay found it had been stopped: the
	// session then neither sends nor confirms anything more.
	paused bool
}

// errPaused ends a session after the relay was stopped for longer than
// PauseLimit.
var errPaused = errors.New("relay: the process was paused; another relay may hold the stream now")

// stream runs one session: reads transactions into the lanes, confirms
// them as they are done, and on the session's end waits for the events in
// flight and confirms what is done.
func (s *streamSource) stream(ctx context.Context, st store.Stream) error {
	sctx, cancel := context.WithCancelCause(ctx)
	ss := &session{st: st, ctx: sctx, cancel: cancel}
	s.mu.Lock()
	s.cur = ss
	s.lastTick = time.Now()
	s.mu.Unlock()
	if err := s.reloadSpilledKeys(sctx); err != nil {
		cancel(err)
		_ = st.Close(context.WithoutCancel(ctx))
		return err
	}
	confirmDone := make(chan struct{})
	go func() {
		defer close(confirmDone)
		s.confirmLoop(ss)
	}()
	err := s.read(ss)
	cancel(err)
	s.dropQueued(ss)
	ss.work.Wait() // the batches in flight finish (or spill)
	<-confirmDone
	if !s.isPaused(ss) {
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(s.r.hardCtx), finishTimeout)
		if err := s.confirm(cctx, ss, true); err != nil {
			s.log.Warn("final confirm failed; the unconfirmed transactions will be read again", slog.Any("error", err))
		}
		ccancel()
	}
	s.mu.Lock()
	s.txs = nil
	s.cur = nil
	paused := ss.paused
	s.mu.Unlock()
	_ = st.Close(context.WithoutCancel(ctx))
	if paused {
		return errPaused
	}
	return err
}

func (s *streamSource) isPaused(ss *session) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return ss.paused
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
		t := &streamTx{end: tx.End, pending: len(tx.Events)}
		s.mu.Lock()
		s.txs = append(s.txs, t)
		s.mu.Unlock()
		for _, ev := range tx.Events {
			if err := s.window.acquire(ss.ctx, eventSize(ev)); err != nil {
				return err
			}
			ss.work.Add(1)
			s.route(&streamItem{ev: ev, tx: t, s: ss})
		}
	}
}

// route hands one event to its type's lane, or spills it at once: an
// event with a future not-before is the poller's, and so is an event of
// an ordered key that already has rows in the table.
func (s *streamSource) route(it *streamItem) {
	ev := it.ev
	if ev.Row.Invalid == "" {
		if err := txbox.ValidateEventType(ev.Row.EventType); err != nil {
			ev.Row.Invalid = err.Error()
		}
	}
	var l *streamLane
	if txbox.ValidateEventType(ev.Row.EventType) == nil {
		var err error
		if l, err = s.lane(ev.Row.EventType); err != nil {
			s.log.Warn("no lane for the event type; spilled for the poller", slog.String("event_type", ev.Row.EventType), slog.Any("error", err))
		}
	}
	switch {
	case ev.Row.Invalid != "":
		// Not routable: dead-letter it with its reason, as a claimed row
		// that cannot be turned into a message is.
		s.spillBehind(l, it, store.OutcomeFailed, time.Time{}, "not sent: the event cannot be turned into a message: "+ev.Row.Invalid)
	case !ev.NotBefore.IsZero() && ev.NotBefore.After(time.Now()):
		s.spillBehind(l, it, store.OutcomeReleased, ev.NotBefore, "")
	case l == nil:
		s.spillNow(it, store.OutcomeReleased, time.Now(), "")
	case !l.push(it.s.ctx, it):
		s.drop(it) // the session is over: the stream reads it again
	}
}

// spillBehind spills it through its lane, behind the queued events of its
// key on an ordered lane, or directly when it has no lane.
func (s *streamSource) spillBehind(l *streamLane, it *streamItem, o store.Outcome, due time.Time, errText string) {
	if l == nil {
		s.spillNow(it, o, due, errText)
		return
	}
	l.spill(it, o, due, errText)
}

// mustSpill reports whether an ordered type's event of key must go behind
// rows already in the table.
func (s *streamSource) mustSpill(eventType, key string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.overflow[eventType] {
		return true
	}
	if key == "" {
		return false
	}
	_, ok := s.spilled[store.StreamKey{EventType: eventType, Key: key}]
	return ok
}

// markSpilled records that an ordered type's key has rows in the table.
func (s *streamSource) markSpilled(eventType, key string) {
	if key == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.spilled) >= maxSpilledKeys {
		s.overflow[eventType] = true
		return
	}
	s.spilled[store.StreamKey{EventType: eventType, Key: key}] = time.Now()
}

// reloadSpilledKeys reads the keys with rows in the table, keeping the
// keys marked since the reload began: a spill that committed after the
// reload's snapshot must still hold its key.
func (s *streamSource) reloadSpilledKeys(ctx context.Context) error {
	start := time.Now()
	fresh := map[store.StreamKey]time.Time{}
	over := map[string]bool{}
	var after *store.StreamKey
	for {
		keys, err := s.streamer.StreamSpilledKeys(ctx, after, spilledKeysPage)
		if err != nil {
			return err
		}
		for _, k := range keys {
			if len(fresh) >= maxSpilledKeys {
				over[k.EventType] = true
				continue
			}
			fresh[k] = start
		}
		if len(keys) < spilledKeysPage {
			break
		}
		last := keys[len(keys)-1]
		after = &last
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, at := range s.spilled {
		if !at.Before(start) {
			fresh[k] = at
		}
	}
	s.spilled, s.overflow = fresh, over
	return nil
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

// eventSize is what an event costs the window: its payload and headers.
func eventSize(ev *store.StreamEvent) int64 {
	n := len(ev.Row.Payload) + len(ev.Row.Key) + len(ev.Row.EventType)
	for k, v := range ev.Row.Headers {
		n += len(k) + len(v)
	}
	return int64(n)
}

// confirmLoop confirms the done transactions every ConfirmInterval, and
// reloads the spilled keys now and then.
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
			ss.cancel(err)
			return
		}
		if time.Since(lastReload) > spilledKeysReload {
			lastReload = time.Now()
			if err := s.reloadSpilledKeys(ss.ctx); err != nil && ss.ctx.Err() == nil {
				s.log.Warn("cannot reload the spilled keys; keeping the ones known", slog.Any("error", err))
			}
		}
	}
}

// confirm confirms the longest prefix of done transactions (all of it
// when final). It returns the confirm's error.
func (s *streamSource) confirm(ctx context.Context, ss *session, final bool) error {
	for {
		s.mu.Lock()
		if ss.paused {
			s.mu.Unlock()
			return nil
		}
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
// relay, so the session drops what it holds instead of sending it.
func (s *streamSource) pauseWatch() {
	defer s.r.wg.Done()
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-s.r.runCtx.Done():
			return
		case <-t.C:
			s.mu.Lock()
			gap := time.Since(s.lastTick)
			s.lastTick = time.Now()
			cur := s.cur
			s.mu.Unlock()
			if cur != nil && gap > s.cfg.PauseLimit {
				s.pause(cur, gap)
			}
		}
	}
}

// pausedFor is how long ago the pause watch last ran.
func (s *streamSource) pausedFor() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return time.Since(s.lastTick)
}

// checkPause ends ss when the process was paused past PauseLimit; it
// reports whether ss may still send.
func (s *streamSource) checkPause(ss *session) bool {
	if d := s.pausedFor(); d > s.cfg.PauseLimit {
		s.pause(ss, d)
	}
	return !s.isPaused(ss) && ss.ctx.Err() == nil
}

// pause ends ss after the process was stopped for d: it sends and
// confirms nothing more.
func (s *streamSource) pause(ss *session, d time.Duration) {
	s.mu.Lock()
	first := !ss.paused
	ss.paused = true
	if first {
		s.health.Pauses++
	}
	s.mu.Unlock()
	if first {
		s.log.Warn("the relay was paused; dropping the events it holds unsent and reopening the stream", slog.Duration("paused", d))
	}
	ss.cancel(errPaused)
}

// statusPoll reads the slot's health every StatusPoll.
func (s *streamSource) statusPoll() {
	defer s.r.wg.Done()
	t := time.NewTicker(s.cfg.StatusPoll)
	defer t.Stop()
	for {
		ctx, cancel := context.WithTimeout(s.r.runCtx, 10*time.Second)
		st, err := s.streamer.StreamStatus(ctx)
		cancel()
		s.mu.Lock()
		s.health.SlotReadAt = time.Now()
		if err != nil {
			s.health.SlotErr = err.Error()
		} else {
			s.health.Slot, s.health.SlotErr = st, ""
			s.health.Lagging = s.cfg.LagThreshold > 0 && max(st.RestartLag, st.FlushLag) > s.cfg.LagThreshold
		}
		s.mu.Unlock()
		select {
		case <-s.r.runCtx.Done():
			return
		case <-t.C:
		}
	}
}

// validate checks the stream's settings.
func (c StreamConfig) validate() error {
	for _, f := range []struct {
		name string
		bad  bool
	}{
		{"window", c.Window < 0},
		{"window-bytes", c.WindowBytes < 0},
		{"lane-queue", c.LaneQueue < 0},
		{"batch-size", c.BatchSize < 0},
		{"status-interval", c.StatusInterval < 0},
		{"standby-interval", c.StandbyInterval < 0},
		{"confirm-interval", c.ConfirmInterval < 0},
		{"pause-limit", c.PauseLimit < 0},
		{"status-poll", c.StatusPoll < 0},
	} {
		if f.bad {
			return &ConfigError{Component: "relay", Field: "stream." + f.name, Reason: "must not be negative"}
		}
	}
	return nil
}

// laneHealth is the lanes' part of Health.Types, one per type the stream
// has seen.
func (s *streamSource) laneHealth() []TypeHealth {
	s.mu.Lock()
	lanes := make([]*streamLane, 0, len(s.lanes))
	for _, l := range s.lanes {
		lanes = append(lanes, l)
	}
	s.mu.Unlock()
	out := make([]TypeHealth, 0, len(lanes))
	for _, l := range lanes {
		out = append(out, l.p.health())
	}
	return out
}
