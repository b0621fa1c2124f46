package startstop

import (
	"context"
	"errors"
	"sync"
)

var (
	// ErrAlreadyStarted is Begin's error when the lifetime began before.
	ErrAlreadyStarted = errors.New("already started")
	// ErrNotStarted is End's error when the lifetime never began.
	ErrNotStarted = errors.New("not started")
	// ErrStopped is Begin's error after End: a lifetime is used once.
	ErrStopped = errors.New("stopped")
)

// Service is a part with this lifecycle.
type Service interface {
	// Start starts the service's goroutines and returns at once.
	Start(ctx context.Context) error
	// Stop stops them and returns when all have ended; when ctx ends
	// first, in-flight work is cut short and Stop returns ctx's error
	// after they ended.
	Stop(ctx context.Context) error
	// Started is closed once Start succeeded.
	Started() <-chan struct{}
	// Stopped is closed once Stop has returned, or would have.
	Stopped() <-chan struct{}
}

// Lifetime is a service's start, goroutines and stop. The zero value is
// ready to Begin; a Lifetime is used once.
type Lifetime struct {
	mu      sync.Mutex
	began   bool
	ending  bool
	ended   bool
	run     context.Context
	stopRun context.CancelFunc
	hard    context.Context
	stopAll context.CancelFunc
	// live counts the goroutines of Go; idle is closed when it reaches
	// zero once ending (a count, not a WaitGroup: a goroutine of the
	// lifetime may start another while End waits).
	live int
	idle chan struct{}
	// started and stopped are made on first use, so that the zero
	// Lifetime is ready.
	started, stopped chan struct{}
}

// Begin starts the lifetime. Run derives from base, Hard from base's
// values only: base's cancellation ends Run (nothing new starts, as when
// End begins) but cuts nothing short, which only End's context does. A
// service that must outlive its caller's request passes
// context.WithoutCancel; a service run for the life of a context (a
// consumer's Run(ctx)) passes that context, so that its end stops the
// service at once, as End would.
func (l *Lifetime) Begin(base context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch {
	case l.ending:
		return ErrStopped
	case l.began:
		return ErrAlreadyStarted
	}
	l.began = true
	l.run, l.stopRun = context.WithCancel(base)
	l.hard, l.stopAll = context.WithCancel(context.WithoutCancel(base))
	l.idle = make(chan struct{})
	close(l.chans().started)
	return nil
}

// chans makes the channels once. l.mu is held.
func (l *Lifetime) chans() *Lifetime {
	if l.started == nil {
		l.started, l.stopped = make(chan struct{}), make(chan struct{})
	}
	return l
}

// Run is the context that ends when End begins, or Begin's base ends.
// Only valid after Begin.
func (l *Lifetime) Run() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.run
}

// Hard is the context that ends when End's context ends (or End
// returns). Only valid after Begin.
func (l *Lifetime) Hard() context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.hard
}

// Go runs f in a goroutine that End waits for. f must return soon after
// Run ends (or Hard, for work that may be cut short). While End waits,
// Go still runs f: work already begun (a claimed batch) must finish. It
// runs nothing and returns false before Begin and once End has waited.
func (l *Lifetime) Go(f func()) bool {
	l.mu.Lock()
	if !l.began || l.ended {
		l.mu.Unlock()
		return false
	}
	l.live++
	l.mu.Unlock()
	go func() {
		defer l.done()
		f()
	}()
	return true
}

// done ends one goroutine of Go.
func (l *Lifetime) done() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.live--
	if l.live == 0 && l.ending {
		close(l.idle)
	}
}

// State reports whether the lifetime began and whether it is ending
// (End was called: it may still be waiting).
func (l *Lifetime) State() (began, ending bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.began, l.ending
}

// Started is closed once Begin succeeded.
func (l *Lifetime) Started() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chans().started
}

// Stopped is closed once End has waited for every goroutine.
func (l *Lifetime) Stopped() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.chans().stopped
}

// End ends Run at once, waits for the goroutines, and, if ctx ends
// first, ends Hard and waits for them still; then it runs last (a
// service's clean-up, nil for none) and closes Stopped. It returns ctx's
// error when ctx ended first, and nil otherwise. Before Begin it returns
// ErrNotStarted and closes Stopped, and Begin is refused from then on.
// A second End runs nothing: it waits, bounded by its own ctx, for the
// first one to finish, and returns nil once it has (the first End's
// deadline was the first caller's, not this one's).
func (l *Lifetime) End(ctx context.Context, last func()) error {
	l.mu.Lock()
	if !l.began {
		// The service will never run: a later Begin is refused, and
		// whoever waits on Stopped need not wait.
		if !l.ending {
			l.ending, l.ended = true, true
			close(l.chans().stopped)
		}
		l.mu.Unlock()
		return ErrNotStarted
	}
	if l.ending {
		stopped := l.stopped
		l.mu.Unlock()
		select {
		case <-stopped:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	l.ending = true
	if l.live == 0 {
		close(l.idle)
	}
	l.stopRun()
	idle := l.idle
	l.mu.Unlock()

	var err error
	select {
	case <-idle:
	case <-ctx.Done():
		err = ctx.Err()
		l.stopAll()
		<-idle
	}
	l.stopAll()
	if last != nil {
		last()
	}
	l.mu.Lock()
	l.ended = true
	close(l.stopped)
	l.mu.Unlock()
	return err
}
