package consumetest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/inbox"
)

// Service is a broker adapter's consumer as the lifecycle tests see it:
// internal/startstop's Service, and Err.
type Service interface {
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Started() <-chan struct{}
	Stopped() <-chan struct{}
	Err() error
}

// Subject is one consumer under the lifecycle tests, on a source (queue,
// stream, topic) of its own.
type Subject struct {
	// Consumer is the adapter's consumer, not started.
	Consumer Service
	// Publish puts a message with id on the consumer's source.
	Publish func(id txbox.ID)
	// Break makes the consumer unable to go on: its channel or
	// connection closed, or its client closed.
	Break func()
	// Fatal is the error Err and Stop then match; nil when the consumer
	// then stops by itself without an error.
	Fatal error
}

// Lifecycle makes the consumers of the lifecycle tests (RunLifecycle):
// a Subject, on a source of its own, handling with h through in.
type Lifecycle func(t *testing.T, in *inbox.Inbox, h inbox.Handler) Subject

// RunLifecycle checks an adapter's Start, Stop, Started, Stopped and Err
// against its real broker: the relay's lifecycle (internal/startstop).
func RunLifecycle(t *testing.T, newSubject Lifecycle) {
	t.Run("StartStop", func(t *testing.T) {
		t.Parallel()
		env := New(t, "life-start")
		s := newSubject(t, env.Inbox, env.Handler)
		c := s.Consumer
		if isClosed(c.Started()) || isClosed(c.Stopped()) {
			t.Fatal("a new consumer is started or stopped")
		}
		if err := c.Start(context.Background()); err != nil {
			t.Fatal(err)
		}
		if !isClosed(c.Started()) || isClosed(c.Stopped()) {
			t.Fatal("after Start: Started open or Stopped closed")
		}
		if err := c.Start(context.Background()); !errors.Is(err, consume.ErrAlreadyStarted) {
			t.Errorf("Start twice: %v, want consume.ErrAlreadyStarted", err)
		}
		id := txbox.NewID()
		s.Publish(id)
		env.WaitEffects(t, []txbox.ID{id}, time.Minute)
		if err := c.Stop(context.Background()); err != nil {
			t.Fatalf("Stop = %v", err)
		}
		if !isClosed(c.Stopped()) || c.Err() != nil {
			t.Fatalf("after Stop: Stopped closed %v, Err %v", isClosed(c.Stopped()), c.Err())
		}
		if err := c.Stop(context.Background()); err != nil {
			t.Errorf("a second Stop = %v, want nil", err)
		}
		if err := c.Start(context.Background()); !errors.Is(err, consume.ErrStopped) {
			t.Errorf("Start after Stop: %v, want consume.ErrStopped", err)
		}
	})
	t.Run("StopBeforeStart", func(t *testing.T) {
		t.Parallel()
		env := New(t, "life-never")
		c := newSubject(t, env.Inbox, env.Handler).Consumer
		if err := c.Stop(context.Background()); !errors.Is(err, consume.ErrNotStarted) {
			t.Errorf("Stop before Start: %v, want consume.ErrNotStarted", err)
		}
		if !isClosed(c.Stopped()) {
			t.Error("Stopped open after a Stop before Start")
		}
		if err := c.Start(context.Background()); !errors.Is(err, consume.ErrStopped) {
			t.Errorf("Start after Stop: %v, want consume.ErrStopped", err)
		}
	})
	t.Run("StopDrains", func(t *testing.T) { t.Parallel(); stopDrains(t, newSubject) })
	t.Run("StopCut", func(t *testing.T) { t.Parallel(); stopCut(t, newSubject) })
	t.Run("StopsByItself", func(t *testing.T) { t.Parallel(); stopsByItself(t, newSubject) })
}

// inFlight starts a consumer whose handler holds (Hold), publishes one
// message, and returns once its handler runs.
func inFlight(t *testing.T, newSubject Lifecycle, consumer string) (*Env, *Hold, Subject, txbox.ID) {
	env := New(t, consumer)
	hold := NewHold(env.Handler, 1)
	s := newSubject(t, env.Inbox, hold.Handler)
	if err := s.Consumer.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := txbox.NewID()
	s.Publish(id)
	<-hold.Started
	return env, hold, s, id
}

// stopDrains: Stop waits for the handler in flight, which finishes and
// commits; its message is settled once.
func stopDrains(t *testing.T, newSubject Lifecycle) {
	env, hold, s, id := inFlight(t, newSubject, "life-drain")
	stopped := make(chan error, 1)
	go func() { stopped <- s.Consumer.Stop(context.Background()) }()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned (%v) while a handler was in flight", err)
	case <-time.After(200 * time.Millisecond):
	}
	hold.Release()
	if err := <-stopped; err != nil {
		t.Fatalf("Stop = %v", err)
	}
	if err, ok := hold.Finished()[id]; !ok || err != nil {
		t.Errorf("handler: finished %v, err %v; want finished without error before Stop returned", ok, err)
	}
	env.CheckExactlyOnce(t, []txbox.ID{id})
}

// stopCut: Stop's context ends while a handler blocks. The handler's
// context is cancelled, its transaction rolls back, and Stop returns the
// context's error once the handler returned.
func stopCut(t *testing.T, newSubject Lifecycle) {
	env, hold, s, id := inFlight(t, newSubject, "life-cut")
	t.Cleanup(hold.Release)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if err := s.Consumer.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Stop = %v, want context.DeadlineExceeded", err)
	}
	if !isClosed(s.Consumer.Stopped()) {
		t.Error("Stopped open after Stop returned")
	}
	if err, ok := hold.Finished()[id]; !ok || err == nil {
		t.Errorf("handler: finished %v, err %v; want cut short before Stop returned", ok, err)
	}
	if n := env.Effects(t)[id]; n != 0 {
		t.Errorf("%d effects of the cut handler, want its transaction rolled back", n)
	}
}

// stopsByItself: a consumer that cannot go on stops by itself: Stopped
// is closed, Err and Stop say why, and it cannot start again.
func stopsByItself(t *testing.T, newSubject Lifecycle) {
	env := New(t, "life-break")
	s := newSubject(t, env.Inbox, env.Handler)
	c := s.Consumer
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	id := txbox.NewID()
	s.Publish(id)
	env.WaitEffects(t, []txbox.ID{id}, time.Minute)
	s.Break()
	select {
	case <-c.Stopped():
	case <-time.After(time.Minute):
		t.Fatal("the consumer did not stop by itself")
	}
	if err := c.Err(); !matches(err, s.Fatal) {
		t.Errorf("Err = %v, want %v", err, s.Fatal)
	}
	if err := c.Stop(context.Background()); !matches(err, s.Fatal) {
		t.Errorf("Stop = %v, want %v", err, s.Fatal)
	}
	if err := c.Start(context.Background()); !errors.Is(err, consume.ErrStopped) {
		t.Errorf("Start after it stopped: %v, want consume.ErrStopped", err)
	}
}

// matches reports whether err is want, or both are nil.
func matches(err, want error) bool {
	if want == nil {
		return err == nil
	}
	return errors.Is(err, want)
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}
