package relay

import (
	"log/slog"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// Wake-ups: an in-process publisher (Wake) or the store's notifications
// (listen) tell the relay that a type has new rows, so its poller claims
// at once instead of at its next poll, and a type without a poller gets
// one (docs/concepts.md, "Background jobs").

// Wake asks the pollers of the given event types to claim at once instead
// of waiting for their next poll; with no types it wakes every poller. A
// type without a poller gets one. Wake-ups are hints: calling it before
// Start or after Stop does nothing. The outbox publisher's OnPublish
// callback can call it for in-process pickup.
func (r *Relay) Wake(eventTypes ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.stopped {
		return
	}
	if len(eventTypes) == 0 {
		for _, p := range r.pollers {
			p.wake()
		}
		return
	}
	for _, t := range eventTypes {
		p := r.pollers[t]
		if p == nil {
			if err := txbox.ValidateEventType(t); err != nil {
				continue
			}
			// Polled at once, with the follow-up polls of a wake-up: an
			// in-process publisher wakes before its commit.
			if err := r.startPollerLocked(t, true); err != nil {
				r.log.Warn("cannot start poller", slog.String("event_type", t), slog.Any("error", err))
			}
			continue
		}
		p.wake()
	}
	r.locks.warnIfShort(r.log)
}

// listen runs the store's wake-up listener until the relay stops,
// restarting it after an error (the Waker reconnects by itself; this is
// the backstop).
func (r *Relay) listen(w store.Waker) {
	defer r.wg.Done()
	ctx := r.runCtx
	// The wait only grows: OutboxListen reconnects by itself and returns
	// only on what it cannot recover from, so its returns count as
	// failures in a row however far apart they come.
	ends := backoff.Streak{Policy: errorBackoff}
	for {
		err := w.OutboxListen(ctx, func(eventType string) { r.Wake(eventType) })
		if ctx.Err() != nil {
			return
		}
		wait := ends.Next()
		r.log.Warn("wake-up listener ended; polling continues", slog.Any("error", err), slog.Duration("retry_in", wait))
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}
