// Package drain gives the consumer adapters one shape of graceful stop
// (docs/inbox.md, "Stopping"): when Run's context ends, take nothing new,
// let the handlers already running finish for up to a deadline, then
// cancel them.
package drain

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrDeadline is the cause of a handler context cancelled because the
// drain deadline passed after Run's context ended.
var ErrDeadline = errors.New("consume: drain deadline passed after stop")

// Context returns the context handlers run with. It carries run's values
// (trace, logger) but not its cancellation: when run ends, handlers that
// are running keep going, and the returned context is cancelled timeout
// later (with cause ErrDeadline). stop releases it; call it when Run
// returns.
func Context(run context.Context, timeout time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(run))
	var mu sync.Mutex
	var timer *time.Timer
	released := false
	stopAfter := context.AfterFunc(run, func() {
		mu.Lock()
		defer mu.Unlock()
		if !released {
			timer = time.AfterFunc(timeout, func() { cancel(ErrDeadline) })
		}
	})
	return ctx, func() {
		stopAfter()
		mu.Lock()
		released = true
		if timer != nil {
			timer.Stop()
		}
		mu.Unlock()
		cancel(context.Canceled)
	}
}
