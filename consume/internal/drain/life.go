package drain

import (
	"cmp"
	"context"
	"sync"
	"time"

	"github.com/txbox/txbox/consume"
	"github.com/txbox/txbox/internal/startstop"
)

// Loop is a consumer adapter's main loop. It takes nothing new once run
// ends, runs its handlers with handlers (Context's), and returns once
// nothing it started is running. It returns while run goes on only when
// the consumer cannot go on: with the error that says why, or nil when
// the caller ended it (a Kafka client closed).
type Loop func(run, handlers context.Context) error

// Life is a consumer adapter's lifecycle (internal/startstop): Start,
// Stop, Started, Stopped, the error that stopped the consumer by itself,
// and Run on top of them for the adapters' Run(ctx). The zero value with
// Timeout set is ready; a Life is used once.
type Life struct {
	// Timeout is the adapter's Config.DrainTimeout: how long the
	// handlers running when stopping began may finish.
	Timeout time.Duration

	// starting serialises Start, and a Stop before Start with it, so
	// that what a Start prepared is always either run or never made.
	starting sync.Mutex
	life     startstop.Lifetime
	release  func() // the handlers' context's

	mu  sync.Mutex
	err error // what stopped the consumer by itself
}

// Start runs prepare (an adapter's subscription, the check Start can
// make) and, when it succeeds, begins the lifetime and runs its loop in
// a goroutine of the lifetime. An error of prepare is returned as it is
// and leaves the consumer unstarted (it may be started again). ctx only
// carries values: the consumer runs until Stop.
func (l *Life) Start(ctx context.Context, prepare func() (Loop, error)) error {
	return l.start(context.WithoutCancel(ctx), prepare)
}

// start is Start on the lifetime's base: Run's ctx, or Start's without
// its cancellation.
func (l *Life) start(base context.Context, prepare func() (Loop, error)) error {
	l.starting.Lock()
	defer l.starting.Unlock()
	switch began, ending := l.life.State(); {
	case ending:
		return consume.ErrStopped
	case began:
		return consume.ErrAlreadyStarted
	}
	loop, err := prepare()
	if err != nil {
		return err
	}
	// Stop before Start takes l.starting: nothing ended the lifetime
	// since the check above.
	if err := l.life.Begin(base); err != nil {
		return err
	}
	run := l.life.Run()
	var handlers context.Context
	handlers, l.release = Context(run, l.life.Hard(), l.Timeout)
	l.life.Go(func() {
		err := loop(run, handlers)
		if run.Err() != nil {
			return // Stop ended it
		}
		l.mu.Lock()
		l.err = err
		l.mu.Unlock()
		// Stopped by itself: end the lifetime as Stop would, from a
		// goroutine of its own since End waits for this one.
		go func() { _ = l.life.End(context.Background(), l.release) }()
	})
	return nil
}

// Stop ends run at once, lets the running handlers finish for up to
// Timeout or until ctx ends, whichever comes first (then cancels their
// context), and returns once every goroutine of the consumer ended. It
// returns ctx's error when ctx ended first, else the error that stopped
// the consumer by itself (Err), else nil. A second Stop waits for the
// first, bounded by its own ctx. Before Start it returns
// consume.ErrNotStarted, and Start is refused from then on.
func (l *Life) Stop(ctx context.Context) error {
	l.starting.Lock()
	if began, _ := l.life.State(); !began {
		_ = l.life.End(ctx, nil)
		l.starting.Unlock()
		return consume.ErrNotStarted
	}
	l.starting.Unlock()
	return cmp.Or(l.life.End(ctx, l.release), l.Err())
}

// Started is closed once Start succeeded.
func (l *Life) Started() <-chan struct{} { return l.life.Started() }

// Stopped is closed once the consumer stopped: by Stop, or by itself.
func (l *Life) Stopped() <-chan struct{} { return l.life.Stopped() }

// Err returns the error that stopped the consumer by itself, nil while
// it runs and after a Stop.
func (l *Life) Err() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.err
}

// Run is an adapter's Run(ctx): Start, then wait for ctx to end or the
// consumer to stop by itself, then Stop with no deadline of its own, so
// that the handlers in flight get the whole Timeout, as Run always gave
// them. The lifetime's base is ctx itself, so that its end stops taking
// work at once, in the call that cancels it, and not a moment later when
// Stop begins: a handler finishing in between would otherwise settle
// before the stop, and its freed prefetch slot (RabbitMQ) be filled by a
// delivery that could only be handed back. It returns Start's error, nil
// once ctx ended, and otherwise the error that stopped the consumer (nil
// for a closed Kafka client).
func (l *Life) Run(ctx context.Context, prepare func() (Loop, error)) error {
	if err := l.start(ctx, prepare); err != nil {
		return err
	}
	select {
	case <-ctx.Done():
	case <-l.Stopped():
	}
	err := l.Stop(context.Background())
	if ctx.Err() != nil {
		return nil
	}
	return err
}
