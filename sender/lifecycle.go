package sender

import (
	"context"
	"fmt"
	"sync"

	"github.com/txbox/txbox"
)

// Lifecycle is the open-then-closed life every sender of this module
// shares: each Send enters it and leaves it, and Close shuts it and waits
// for the Sends still inside before the sender releases its connections.
// Close thereby flushes what is in flight instead of cutting it off (an
// unacked message would only come back as a retry). The zero value is
// open; a Lifecycle must not be copied after first use.
//
// A sender's Send is then s.life.Send(ctx, name, msgs, s.send), and its
// Close:
//
//	first := s.life.Shut()     // later Sends fail with txbox.ErrClosed
//	err := s.life.Wait(ctx)    // the Sends in flight finish, or ctx ends
//	if first { release the connection }
type Lifecycle struct {
	mu     sync.Mutex // guards closed and the Add of inside
	closed bool
	// inside counts the Sends that entered and have not left.
	inside sync.WaitGroup
}

// Enter admits one Send. It returns [txbox.ErrClosed] once Shut was
// called; the sender wraps it with its name and as transient (the relay
// keeps the rows for a sender that is being replaced or stopped). Every
// Enter that returns nil must be matched by one Leave.
func (l *Lifecycle) Enter() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return txbox.ErrClosed
	}
	l.inside.Add(1)
	return nil
}

// Leave ends a Send that Enter admitted.
func (l *Lifecycle) Leave() { l.inside.Done() }

// Shut closes the lifecycle to new Sends. It reports whether this call closed
// it, so a sender releases its connections only once however often Close
// is called.
func (l *Lifecycle) Shut() (first bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	first = !l.closed
	l.closed = true
	return first
}

// Closed reports whether Shut was called. A sender that (re)connects
// lazily checks it so that a Send still in flight during Close does not
// dial a new connection that Close would miss.
func (l *Lifecycle) Closed() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.closed
}

// Wait returns once every Send that entered has left, or ctx.Err() when
// ctx ends first (the Sends keep running, each bounded by its own
// context, and the goroutine that watches them ends with the last). Call
// it after Shut: no Send may enter while Wait runs.
func (l *Lifecycle) Wait(ctx context.Context) error {
	drained := make(chan struct{})
	go func() {
		l.inside.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send is a sender's Send within the lifecycle: an empty batch returns nil at once
// (nothing to deliver, even after Close); after Shut every message fails
// with [txbox.ErrClosed], transient, prefixed with name ("kafka sender");
// otherwise send runs between Enter and Leave, so Close waits for it.
func (l *Lifecycle) Send(ctx context.Context, name string, msgs []*Message, send func(context.Context, []*Message) error) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := l.Enter(); err != nil {
		return txbox.Transient(fmt.Errorf("%s: %w", name, err))
	}
	defer l.Leave()
	return send(ctx, msgs)
}

// Gate is the former name of [Lifecycle].
//
// Deprecated: use Lifecycle.
type Gate = Lifecycle
