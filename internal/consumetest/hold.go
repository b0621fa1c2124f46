package consumetest

import (
	"context"
	"maps"
	"sync"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/inbox"
)

// Hold wraps a handler so that each call, once its effect is written,
// waits until Release or until its context ends, the way a slow handler
// is caught by a stop. The drain tests use it to check that a stop lets
// the handlers in flight finish instead of cancelling them.
type Hold struct {
	// Started receives the id of each message whose effect is written,
	// before the call waits.
	Started chan txbox.ID

	next     inbox.Handler
	release  chan struct{}
	mu       sync.Mutex
	finished map[txbox.ID]error
}

// NewHold wraps next, with room in Started for n messages.
func NewHold(next inbox.Handler, n int) *Hold {
	return &Hold{Started: make(chan txbox.ID, n), next: next, release: make(chan struct{}), finished: map[txbox.ID]error{}}
}

// Handler is the held handler.
func (h *Hold) Handler(ctx context.Context, tx any, m inbox.Message) error {
	if err := h.next(ctx, tx, m); err != nil {
		return err
	}
	h.Started <- m.ID
	var err error
	select {
	case <-h.release:
	case <-ctx.Done():
		err = ctx.Err()
	}
	h.mu.Lock()
	h.finished[m.ID] = err
	h.mu.Unlock()
	return err
}

// Release lets every held call, and every later one, return.
func (h *Hold) Release() { close(h.release) }

// Finished returns what each call that stopped waiting returned: nil when
// released, the context's error when its context ended first.
func (h *Hold) Finished() map[txbox.ID]error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return maps.Clone(h.finished)
}
