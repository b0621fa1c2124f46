package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"go.opentelemetry.io/otel/trace"

	"github.com/txbox/txbox/internal/startstop"
	"github.com/txbox/txbox/sender"
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
	hooks []Hook
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
}

// lane is the delivery of one event type's batches.
type lane struct {
	deps laneDeps
	s    *settings
	// dest names the destination the type's route resolves to; circuit
	// is the breaker of that destination and of the sender's connection.
	dest    string
	circuit *breaker
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

func newLane(deps laneDeps, s *settings) *lane {
	dest := sender.DestinationOf(s.sender, s.route)
	l := &lane{
		deps:    deps,
		s:       s,
		dest:    dest,
		circuit: deps.circuits.breaker(s.senderName, dest),
		log:     deps.log.With(slog.String("event_type", s.eventType), slog.String("sender", s.senderName)),
		send:    s.sender.Send,
		slots:   make(chan struct{}, s.inFlight),
	}
	if s.ordered() {
		l.send = l.sendOrdered // in waves: relay/ordered.go
	}
	return l
}

// health is the lane's part of its type's health; the source adds its
// own (a poller its last poll and delay).
func (l *lane) health() TypeHealth {
	l.mu.Lock()
	defer l.mu.Unlock()
	return TypeHealth{
		EventType: l.s.eventType, Sender: l.s.senderName, Destination: l.dest, Claim: l.s.claim,
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

// dispatch delivers a batch on its own goroutine; the caller holds a slot
// and the circuit's ticket t, which the goroutine gives back after the
// finish. taken is when the batch was taken: a claimed batch's lease
// counts from it (deliver).
func (l *lane) dispatch(b batch, t ticket, taken time.Time) {
	l.mu.Lock()
	l.inFlight++
	l.mu.Unlock()
	l.deps.life.Go(func() {
		l.deliver(b, t, taken)
		l.mu.Lock()
		l.inFlight--
		l.mu.Unlock()
		<-l.slots
		if l.finished != nil {
			l.finished()
		}
	})
}
