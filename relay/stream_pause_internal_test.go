package relay

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"
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
