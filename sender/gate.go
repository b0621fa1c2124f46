package sender

import (
	"context"
	"fmt"
	"sync"

	"github.com/txbox/txbox"
)

// Gate is the lifecycle every sender of this module shares: each Send
// enters it and leaves it, and Close shuts it and waits for the Sends
// still inside before the sender releases its connections. Close thereby
// flushes what is in flight instead of cutting it off (an unacked message
// would only come back as a retry). The zero value is an open gate; a Gate
// must not be copied after first use.
//
// A sender's Send is then s.gate.Send(ctx, name, msgs, s.send), and its
// Close:
//
//	first := s.gate.Shut()     // later Sends fail with txbox.ErrClosed
//	err := s.gate.Wait(ctx)    // the Sends in flight finish, or ctx ends
//	if first { release the connection }
type Gate struct {
	mu     sync.Mutex // guards closed and the Add of inside
	closed bool
	// inside counts the Sends that entered and have not left.
	inside sync.WaitGroup
}

// Enter admits one Send. It returns [txbox.ErrClosed] once Shut was
// called; the sender wraps it with its name and as transient (the relay
// keeps the rows for a sender that is being replaced or stopped). Every
// Enter that returns nil must be matched by one Leave.
func (g *Gate) Enter() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return txbox.ErrClosed
	}
	g.inside.Add(1)
	return nil
}

// Leave ends a Send that Enter admitted.
func (g *Gate) Leave() { g.inside.Done() }

// Shut closes the gate to new Sends. It reports whether this call closed
// it, so a sender releases its connections only once however often Close
// is called.
func (g *Gate) Shut() (first bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	first = !g.closed
	g.closed = true
	return first
}

// Closed reports whether Shut was called. A sender that (re)connects
// lazily checks it so that a Send still in flight during Close does not
// dial a new connection that Close would miss.
func (g *Gate) Closed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closed
}

// Wait returns once every Send that entered has left, or ctx.Err() when
// ctx ends first (the Sends keep running, each bounded by its own
// context, and the goroutine that watches them ends with the last). Call
// it after Shut: no Send may enter while Wait runs.
func (g *Gate) Wait(ctx context.Context) error {
	drained := make(chan struct{})
	go func() {
		g.inside.Wait()
		close(drained)
	}()
	select {
	case <-drained:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Send is a sender's Send in the gate: an empty batch returns nil at once
// (nothing to deliver, even after Close); after Shut every message fails
// with [txbox.ErrClosed], transient, prefixed with name ("kafka sender");
// otherwise send runs between Enter and Leave, so Close waits for it.
func (g *Gate) Send(ctx context.Context, name string, msgs []*Message, send func(context.Context, []*Message) error) error {
	if len(msgs) == 0 {
		return nil
	}
	if err := g.Enter(); err != nil {
		return txbox.Transient(fmt.Errorf("%s: %w", name, err))
	}
	defer g.Leave()
	return send(ctx, msgs)
}
