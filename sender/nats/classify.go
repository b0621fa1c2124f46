package nats

import (
	"context"
	"errors"
	"fmt"
	"time"

	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/sender"
)

// streamLookupTTL is how long the answer of a stream lookup (does a stream
// bind this subject?) is reused: a batch of messages to a subject without
// a stream costs one lookup, not one per message.
const streamLookupTTL = 5 * time.Second

// maxStreamLookup bounds one stream lookup.
const maxStreamLookup = 2 * time.Second

// streamLookup is one answer to "does a stream bind this subject?".
type streamLookup struct {
	done chan struct{} // closed once the fields below are set
	at   time.Time
	// stream is the stream found, "" when none binds the subject (and err
	// is nil).
	stream string
	// err is why the lookup failed (JetStream did not answer).
	err error
}

// classify wraps a publish or ack error with its txbox class.
func (s *Sender) classify(ctx context.Context, err error, subject string) error {
	var apiErr *jetstream.APIError
	switch {
	case errors.Is(err, jetstream.ErrNoStreamResponse):
		// "No responders": nothing answered on the subject. Either no
		// stream binds it (a rejection of this message), or the stream
		// has no leader right now (an election, a restore) or JetStream
		// is down (an outage). Only a lookup tells them apart.
		stream, lerr := s.lookupStream(ctx, subject)
		switch {
		case lerr != nil:
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w: %w (the stream lookup failed too: %v)", subject, ErrStreamUnavailable, err, lerr))
		case stream == "":
			return txbox.Rejected(fmt.Errorf("nats: subject %q: %w: %w", subject, ErrNoStream, err))
		default:
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w: stream %q exists but did not answer (leader election or restore?): %w", subject, ErrStreamUnavailable, stream, err))
		}
	case errors.Is(err, natsgo.ErrMaxPayload), errors.Is(err, natsgo.ErrBadSubject),
		errors.Is(err, natsgo.ErrBadHeaderMsg):
		return txbox.Permanent(fmt.Errorf("nats: subject %q: %w", subject, err))
	case errors.Is(err, natsgo.ErrConnectionClosed), errors.Is(err, natsgo.ErrDisconnected),
		errors.Is(err, natsgo.ErrConnectionReconnecting), errors.Is(err, natsgo.ErrConnectionDraining),
		errors.Is(err, natsgo.ErrReconnectBufExceeded), errors.Is(err, jetstream.ErrConnectionClosed):
		// The connection itself: every subject of this sender is down
		// with it. (No reconnect buffer: a publish while reconnecting
		// fails with ErrReconnectBufExceeded.)
		return sender.Disconnected(txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err)))
	case errors.As(err, &apiErr):
		switch {
		case apiErr.ErrorCode == jetstream.JSErrCodeStreamMessageExceedsMaximum:
			// Larger than the stream's max_msg_size: it never fits.
			return txbox.Permanent(fmt.Errorf("nats: subject %q: %w (the stream's max_msg_size; raise it with `nats stream edit --max-msg-size`)", subject, err))
		case apiErr.Code >= 500:
			// JetStream not enabled, a stream full under DiscardNew, no
			// quorum: the destination, not the message.
			return txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err))
		}
		return txbox.Rejected(fmt.Errorf("nats: subject %q: %w", subject, err))
	default:
		// Timeouts, a stalled publisher: the destination, not the
		// message.
		return txbox.Transient(fmt.Errorf("nats: subject %q: %w", subject, err))
	}
}

// lookupStream returns the stream that binds subject, "" when none does,
// or why JetStream could not tell. Answers are reused for
// streamLookupTTL, and concurrent lookups of one subject share one
// request, so a batch to an unbound subject costs one lookup.
func (s *Sender) lookupStream(ctx context.Context, subject string) (string, error) {
	s.lmu.Lock()
	l := s.lookups[subject]
	if l != nil {
		select {
		case <-l.done:
			if time.Since(l.at) >= streamLookupTTL {
				l = nil
			}
		default: // in flight: wait for it
		}
	}
	if l != nil {
		s.lmu.Unlock()
		select {
		case <-l.done:
			return l.stream, l.err
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	l = &streamLookup{done: make(chan struct{})}
	s.lookups[subject] = l
	s.lmu.Unlock()

	lctx, cancel := context.WithTimeout(ctx, min(s.ackTimeout, maxStreamLookup))
	stream, err := s.js.StreamNameBySubject(lctx, subject)
	cancel()
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		stream, err = "", nil
	}
	l.stream, l.err, l.at = stream, err, time.Now()
	if err != nil && ctx.Err() != nil {
		// Our caller gave up, which says nothing about the stream: do
		// not keep the answer.
		s.lmu.Lock()
		if s.lookups[subject] == l {
			delete(s.lookups, subject)
		}
		s.lmu.Unlock()
	}
	close(l.done)
	return stream, err
}
