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
	// freed is closed (and replaced) when something is released while
	// readers wait (waiters of them): not on every release, which made a
	// channel per event in a drain.
	freed   chan struct{}
	waiters int
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
		w.waiters++
		w.mu.Unlock()
		var err error
		select {
		case <-ctx.Done():
			err = context.Cause(ctx)
		case <-freed:
		}
		w.mu.Lock()
		w.waiters--
		w.mu.Unlock()
		if err != nil {
			return err
		}
	}
}

// release gives back one event of size bytes.
func (w *holdWindow) release(size int64) {
	w.mu.Lock()
	w.events--
	w.bytes -= size
	if w.waiters > 0 {
		close(w.freed)
		w.freed = make(chan struct{})
	}
	w.mu.Unlock()
}

// held is what the window holds now.
func (w *holdWindow) held() (events int, bytes int64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.events, w.bytes
}
