package nats

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// Errors. Compare with errors.Is.
var (
	// ErrNotConnected is returned, Transient and marked
	// [sender.Disconnected], for a batch sent while the connection to NATS
	// is down or being re-established. The error names the servers
	// (without credentials) and the last dial error.
	ErrNotConnected = errors.New("nats: not connected")
	// ErrNoStream is returned, Rejected, for a message whose subject no
	// stream binds, confirmed by a stream lookup. The error also matches
	// jetstream.ErrNoStreamResponse.
	ErrNoStream = errors.New("nats: no stream bound to the subject")
	// ErrStreamUnavailable is returned, Transient, for a message that got
	// no answer from JetStream ("no responders") although the subject is
	// not known to be unbound: the stream exists but has no leader (an
	// election, a restore), or JetStream itself did not answer the lookup.
	// The error also matches jetstream.ErrNoStreamResponse.
	ErrStreamUnavailable = errors.New("nats: stream temporarily unavailable")
)

// MessageError is returned, Permanent, for a message that cannot be
// published at all: no subject in its route, or a header NATS cannot
// carry or txbox refuses to pass on.
type MessageError struct {
	Reason string
}

func (e *MessageError) Error() string { return "nats: cannot publish message: " + e.Reason }

// Sender publishes messages to NATS JetStream. It is safe for concurrent
// use.
type Sender struct {
	nc         *natsgo.Conn
	ownConn    bool
	js         jetstream.JetStream
	ackTimeout time.Duration
	slots      chan struct{} // one per publish awaiting its ack
	release    func()
	stream     string // the stream Provision creates or updates
	log        *slog.Logger
	ce         sender.CloudEvents

	// dial follows the connects of a connection New made (nil for
	// NewFromConn); Send reports its last error with ErrNotConnected.
	dial *dialLog

	lmu     sync.Mutex
	lookups map[string]*streamLookup // by subject

	// life admits Sends until Close, which waits for those in flight.
	life sender.Lifecycle
}

var (
	_ sender.Sender           = (*Sender)(nil)
	_ sender.Destinationer    = (*Sender)(nil)
	_ sender.QuickAcker       = (*Sender)(nil)
	_ sender.Provisioner      = (*Sender)(nil)
	_ sender.ProvisionChecker = (*Sender)(nil)
)

// AcksQuickly implements [sender.QuickAcker]: NATS JetStream acknowledges a batch
// within milliseconds, so the relay defaults this sender's event types to
// the lock claim where the store has one.
func (s *Sender) AcksQuickly() bool { return true }

// Destination implements [sender.Destinationer]: the route's subject. The
// subject, not the stream, is the failure domain the relay keys its
// circuit breaker by: it is known without asking the server, a subject
// that no stream binds fails alone, and when a whole stream is
// unavailable each of its subjects opens its own circuit on its first
// failing batch without burning attempts. A failure of the connection
// itself is marked [sender.Disconnected] and pauses every subject at once.
func (s *Sender) Destination(r sender.Route) string { return r.Subject }

// Send publishes every message asynchronously, then waits for their acks
// (see [sender.Sender]).
func (s *Sender) Send(ctx context.Context, msgs []*sender.Message) error {
	return s.life.Send(ctx, "nats: send", msgs, s.send)
}

// send is Send within the lifecycle, for a batch that is not empty.
func (s *Sender) send(ctx context.Context, msgs []*sender.Message) error {
	if err := ctx.Err(); err != nil {
		return txbox.Transient(fmt.Errorf("nats: not sent: %w", err))
	}
	if !s.nc.IsConnected() {
		return s.notConnected()
	}
	errs := make([]error, len(msgs))
	futures := s.publishAll(ctx, msgs, errs)
	s.awaitAcks(ctx, msgs, futures, errs)
	return sender.Summarize(errs)
}

// publishAll publishes msgs asynchronously, within MaxPending, and returns
// their futures (nil for a message not published: errs says why).
func (s *Sender) publishAll(ctx context.Context, msgs []*sender.Message, errs []error) []jetstream.PubAckFuture {
	// The server's max_payload, learnt at connect (and at each
	// reconnect, from the server reached then).
	maxPayload := s.nc.MaxPayload()
	futures := make([]jetstream.PubAckFuture, len(msgs))
	// The stall wait bounds a publish blocked by MaxPending; acks free
	// room on their own, so it only expires when JetStream stops acking.
	stall := jetstream.WithStallWait(s.ackTimeout)
	for i, m := range msgs {
		if err := ctx.Err(); err != nil {
			for j := i; j < len(msgs); j++ {
				errs[j] = txbox.Transient(fmt.Errorf("nats: not sent: %w", err))
			}
			break
		}
		if m == nil {
			errs[i] = txbox.Permanent(&MessageError{Reason: "nil message"})
			continue
		}
		nm, hdrBound, err := s.build(m)
		if err != nil {
			errs[i] = txbox.Permanent(err)
			continue
		}
		if err := checkSize(nm, hdrBound, maxPayload); err != nil {
			errs[i] = err
			continue
		}
		if !s.acquire(ctx) {
			for j := i; j < len(msgs); j++ {
				errs[j] = txbox.Transient(fmt.Errorf("nats: not sent: %w", ctx.Err()))
			}
			break
		}
		f, err := s.js.PublishMsgAsync(nm, stall)
		if err != nil {
			// Not registered, so no callback will free the slot.
			s.release()
			errs[i] = s.classify(ctx, err, m.Route.Subject)
			continue
		}
		futures[i] = f
	}
	return futures
}

// awaitAcks waits for the ack of each future, or for ctx, and records the
// failures in errs.
func (s *Sender) awaitAcks(ctx context.Context, msgs []*sender.Message, futures []jetstream.PubAckFuture, errs []error) {
	for i, f := range futures {
		if f == nil {
			continue
		}
		ok, failed := f.Ok(), f.Err()
		// An ack that already arrived wins over a context cancelled
		// meanwhile: it is durable.
		select {
		case <-ok:
			continue
		case err := <-failed:
			errs[i] = s.classify(ctx, err, msgs[i].Route.Subject)
			continue
		default:
		}
		select {
		case <-ok:
		case err := <-failed:
			errs[i] = s.classify(ctx, err, msgs[i].Route.Subject)
		case <-ctx.Done():
			errs[i] = txbox.Transient(fmt.Errorf("nats: ack not received: %w", ctx.Err()))
		}
	}
}

// notConnected is the error of a Send while the connection is down: it
// names the servers (nc.Servers gives scheme://host, never credentials)
// and the last dial error, so "not connected" comes with its cause.
func (s *Sender) notConnected() error {
	err := fmt.Errorf("%w to %s", ErrNotConnected, strings.Join(s.nc.Servers(), ","))
	if last := s.dial.last(); last != "" {
		err = fmt.Errorf("%w (last error: %s)", err, last)
	}
	return sender.Disconnected(txbox.Transient(err))
}

// acquire takes a MaxPending slot, or gives up when ctx is done.
func (s *Sender) acquire(ctx context.Context) bool {
	select {
	case s.slots <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// Close waits for the Sends in flight to get their acks (bounded by ctx),
// then releases the publisher and, when New made it, the connection,
// whose last callbacks (connection log lines) have run when it returns.
// Later Sends fail with txbox.ErrClosed. Close is idempotent.
func (s *Sender) Close(ctx context.Context) error {
	first := s.life.Shut()
	var err error
	if werr := s.life.Wait(ctx); werr != nil {
		err = fmt.Errorf("nats: close: sends still in flight: %w", werr)
	}
	if first {
		if s.ownConn {
			// Closing the connection ends the publisher's reply
			// subscription and status goroutine. CleanupPublisher is not
			// called first: in nats.go v1.55 it can strand that goroutine
			// on a nil channel when it runs before the goroutine started.
			s.nc.Close()
			// A callback queued before the close (a failed dial's
			// "connect failed; retrying") would otherwise log after
			// Close returned, into a log its caller may be closing.
			select {
			case <-s.dial.callbacksDone:
			case <-ctx.Done():
			}
		} else {
			// A borrowed connection stays open: release the reply
			// subscription (subject to the nats.go race above, which can
			// leave one idle goroutine behind).
			s.js.CleanupPublisher()
		}
	}
	return err
}
