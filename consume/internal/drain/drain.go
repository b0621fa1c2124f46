// Package drain gives the consumer adapters one shape of graceful stop
// (docs/inbox.md, "Stopping"): once stopping begins, take nothing new,
// let the handlers already running finish for up to a deadline, then
// cancel them. Life is the adapters' lifecycle built on it.
package drain

import (
	"context"
	"errors"
	"sync"
	"time"
)

// ErrDeadline is the cause of a handler context cancelled because the
// drain deadline passed after stopping began.
var ErrDeadline = errors.New("consume: drain deadline passed after stop")

// Context returns the context handlers run with. It is a child of hard:
// it carries hard's values (trace, logger) and ends when hard does (a
// stop whose own context ended). It does not end with run: when run ends
// (stopping began), handlers that are running keep going, and the
// returned context is cancelled timeout later (with cause ErrDeadline).
// stop releases it; call it once the handlers returned.
func Context(run, hard context.Context, timeout time.Duration) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(hard)
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
