package relay

import (
	"context"
	"sync"
)

// holdWindow bounds what the stream holds between reading and confirming,
// in events and in payload bytes: a backlog of any size, of any payload
// size, costs the relay at most the window (StreamConfig.Window and
// WindowBytes). One event larger than the byte bound is still let through
// when the window is empty, so it cannot block the stream for ever.
type holdWindow struct {
	maxEvents int
	maxBytes  int64

	mu     sync.Mutex
	events int
	bytes  int64
	// freed is closed (and replaced) when something is released while a
	// reader waits (waiting): not on every release, which made a channel
	// per event in a drain.
	freed   chan struct{}
	waiting bool
}

func newHoldWindow(maxEvents int, maxBytes int64) *holdWindow {
	return &holdWindow{maxEvents: maxEvents, maxBytes: maxBytes, freed: make(chan struct{})}
}

// acquire waits until an event of size bytes fits, or ctx ends.
func (w *holdWindow) acquire(ctx context.Context, size int64) error {
	for {
		w.mu.Lock()
		if w.events == 0 || (w.events < w.maxEvents && w.bytes+size <= w.maxBytes) {
			w.events++
			w.bytes += size
			w.mu.Unlock()
			return nil
		}
		freed := w.freed
		w.waiting = true
		w.mu.Unlock()
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-freed:
		}
	}
}

// release gives back one event of size bytes.
func (w *holdWindow) release(size int64) {
	w.mu.Lock()
	w.events--
	w.bytes -= size
	if w.waiting {
		close(w.freed)
		w.freed, w.waiting = make(chan struct{}), false
	}
	w.mu.Unlock()
}

// held is what the window holds now.
func (w *holdWindow) held() (events int, bytes int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events, w.bytes
}
