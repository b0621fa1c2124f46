package relay

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/sender"
)

// TestPauseTickLosesBeforeReset: a relay resumed after a stop longer
// than PauseLimit must never let a lane find its session sendable, not
// even in the moment the pause watch ticks. The watch once reset its tick
// before losing the session; a lane checking between the two saw a fresh
// tick and a live session, and a resumed relay sent a 1,000-event batch
// from a stream another relay held.
func TestPauseTickLosesBeforeReset(t *testing.T) {
	for i := range 2000 {
		s := &streamSource{
			cfg:      StreamConfig{PauseLimit: time.Second},
			log:      slog.New(slog.NewTextHandler(io.Discard, nil)),
			lastTick: time.Now().Add(-10 * time.Second),
		}
		sctx, cancel := context.WithCancelCause(context.Background())
		lctx, lose := context.WithCancelCause(context.Background())
		ss := &session{ctx: sctx, cancel: cancel, lostCtx: lctx, lostFn: lose}
		s.cur = ss
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			s.pauseTick()
		})
		sendable := 0
		wg.Go(func() {
			<-start
			for range 200 {
				if s.checkPause(ss) {
					sendable++
				}
			}
		})
		close(start)
		wg.Wait()
		if sendable > 0 {
			t.Fatalf("round %d: a lane found the paused session sendable %d times", i, sendable)
		}
		if !ss.lost() || s.health.Pauses != 1 {
			t.Fatalf("round %d: lost %v, pauses %d; want lost once", i, ss.lost(), s.health.Pauses)
		}
	}
}

// TestLoseSetsTheStateWithTheCount: a health snapshot never shows a lost
// session still streaming. lose once counted the loss and set the state
// under two separate locks, and a probe between them read "1 loss,
// streaming" (TestStreamLostSessionSendsNothingMore failed so in make
// test).
func TestLoseSetsTheStateWithTheCount(t *testing.T) {
	for i := range 2000 {
		s := &streamSource{
			log:    slog.New(slog.NewTextHandler(io.Discard, nil)),
			window: newHoldWindow(10, 1<<20),
		}
		s.health.State = StreamStreaming
		sctx, cancel := context.WithCancelCause(context.Background())
		lctx, lose := context.WithCancelCause(context.Background())
		ss := &session{ctx: sctx, cancel: cancel, lostCtx: lctx, lostFn: lose}
		var wg sync.WaitGroup
		start := make(chan struct{})
		wg.Go(func() {
			<-start
			s.lose(ss, errTakenOver)
		})
		seen := 0
		wg.Go(func() {
			<-start
			for range 200 {
				if h := s.healthSnapshot(); h.Losses > 0 && h.State == StreamStreaming {
					seen++
				}
			}
		})
		close(start)
		wg.Wait()
		if seen > 0 {
			t.Fatalf("round %d: %d snapshots showed a lost session still streaming", i, seen)
		}
	}
}

// pausedAfterScope is a stream batch whose process is stopped right after
// the lane asked for its scope: its Scope moves the pause watch's last
// tick back past PauseLimit, as a SIGSTOP there would, with the watch not
// yet ticked since the resume.
type pausedAfterScope struct{ *streamBatch }

func (b pausedAfterScope) Scope() context.Context {
	scope := b.streamBatch.Scope()
	src := b.l.src
	src.mu.Lock()
	src.lastTick = time.Now().Add(-10 * src.cfg.PauseLimit)
	src.mu.Unlock()
	return scope
}

// TestStreamPauseBeforeSendSendsNothing: a stream batch taken before the
// process was stopped, which reaches its send after the resume and
// before the pause watch ticks, sends nothing: the lane's last look at
// the scope, right before the send, runs the pause check. The scope was
// once only the session's lost context, checked for a pause when the
// batch asked for it; a stop between that check and the send let a
// resumed relay begin a 1,000-event batch of a stream another relay held
// (make chaos, TestWALChaosTakeover/stopped). Its event is dropped, not
// finished: its transaction stays unconfirmed, for the relay that holds
// the stream now.
func TestStreamPauseBeforeSendSendsNothing(t *testing.T) {
	for _, paused := range []bool{false, true} {
		snd := &scriptSender{}
		src, l, ss := pauseTestLane(t, snd)
		ev := streamEvent("orders", "")
		if err := src.window.acquire(context.Background(), eventSize(ev)); err != nil {
			t.Fatal(err)
		}
		ss.work.Add(1)
		tx := &streamTx{end: 100, pending: 1}
		var b batch = newStreamBatch(l, []*streamItem{{ev: ev, tx: tx, s: ss, l: l, seq: 1}})
		if paused {
			b = pausedAfterScope{b.(*streamBatch)}
		}
		tk, ok := l.lane.acquire(context.Background())
		if !ok || !tk.ok {
			t.Fatal("no ticket")
		}
		l.lane.deliver(b, tk, time.Now())
		<-l.lane.slots // what dispatch gives back after the finish
		n, _ := src.window.held()
		switch {
		case n != 0:
			t.Errorf("paused %v: the window still holds %d events", paused, n)
		case !paused && (snd.calls.Load() != 1 || tx.pending != 0 || ss.lost()):
			t.Errorf("not paused: %d sends, %d pending, lost %v; want the event sent and done", snd.calls.Load(), tx.pending, ss.lost())
		case paused && snd.calls.Load() != 0:
			t.Errorf("paused: the resumed relay sent the batch (%d sends)", snd.calls.Load())
		case paused && (!errors.Is(context.Cause(ss.lostCtx), errPaused) || src.health.Pauses != 1):
			t.Errorf("paused: session lost by %v, %d pauses; want lost to the pause once", context.Cause(ss.lostCtx), src.health.Pauses)
		case paused && (tx.pending != 1 || src.health.Dropped != 1):
			t.Errorf("paused: %d pending, %d dropped; want the event dropped unconfirmed", tx.pending, src.health.Dropped)
		}
	}
}

// pauseTestLane is a stream source with one open session, and its lane
// of "orders" sending to snd; the lane's lifetime ends with the test.
func pauseTestLane(t *testing.T, snd sender.Sender) (*streamSource, *streamLane, *session) {
	t.Helper()
	cfg := Config{Senders: map[string]sender.Sender{"test": snd}}.withDefaults()
	set, err := cfg.settingsFor("orders")
	if err != nil {
		t.Fatal(err)
	}
	life := &startstop.Lifetime{}
	if err := life.Begin(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = life.End(context.Background(), nil) })
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	ld := laneDeps{log: log, hard: life.Hard(), life: life,
		circuits: newCircuitSet([]string{"test"}, cfg.Circuit, time.Now, func(txbox.CircuitEvent) {})}
	src := &streamSource{cfg: StreamConfig{PauseLimit: time.Second}, log: log, window: newHoldWindow(10, 1<<20), lastTick: time.Now()}
	sctx, cancel := context.WithCancelCause(context.Background())
	lctx, lose := context.WithCancelCause(context.Background())
	ss := &session{ctx: sctx, cancel: cancel, lostCtx: lctx, lostFn: lose}
	src.cur = ss
	l := &streamLane{src: src, lane: newLane(ld, set), notify: make(chan struct{}, 1), keys: map[string]*keyState{}}
	return src, l, ss
}
