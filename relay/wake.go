package relay

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/store"
)

// Wake-ups: an in-process publisher (Wake) or the store's notifications
// (listen) tell the relay that a type has new rows, so its poller claims
// at once instead of at its next poll, and a type without a poller gets
// one once a wake-up look finds its rows (docs/concepts.md, "Background
// jobs").

// Wake asks the pollers of the given event types to claim at once instead
// of waiting for their next poll; with no types it wakes every poller. A
// type without a poller gets one as soon as it has pending rows: Wake asks
// for a look for pending types (one query however many calls ask, at most
// one every 250ms), which starts the missing pollers as discovery does,
// and follows the type up for a few seconds (6 looks within 8s) when the
// look does not find it yet (an OnPublish call comes before the commit).
// A type with no pending rows gets no poller. Wake-ups are hints: after
// Stop it does nothing. Before Start it asks for the same look, run as
// soon as the relay starts: an in-process publisher wakes the relay
// before its commit, and a commit that lands just after Start, after
// discovery's first look, would otherwise wait for discovery's next
// round. The outbox publisher's OnPublish callback can call it for
// in-process pickup.
func (r *Relay) Wake(eventTypes ...string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	began, ending := r.life.State()
	if ending {
		return
	}
	if !began {
		// No poller exists yet; the look loop starts with Start and
		// finds this request waiting (its request is buffered, the names
		// followed up as for any wake-up).
		for _, t := range eventTypes {
			if txbox.ValidateEventType(t) == nil {
				r.looks.want(t, time.Now())
			}
		}
		if len(eventTypes) == 0 {
			r.looks.want("", time.Now())
		}
		return
	}
	if len(eventTypes) == 0 {
		for _, p := range r.pollers {
			p.wake()
		}
		r.looks.want("", time.Now())
		return
	}
	for _, t := range eventTypes {
		if p := r.pollers[t]; p != nil {
			p.wake()
		} else if txbox.ValidateEventType(t) == nil {
			r.looks.want(t, time.Now())
		}
	}
}

// listen runs the store's wake-up listener until the relay stops,
// restarting it after an error (the Waker reconnects by itself; this is
// the backstop).
func (r *Relay) listen(w store.Waker) {
	ctx := r.runCtx
	// The wait only grows: OutboxListen reconnects by itself and returns
	// only on what it cannot recover from, so its returns count as
	// failures in a row however far apart they come.
	ends := backoff.Streak{Policy: errorBackoff}
	for {
		wake := func(eventType string) { r.Wake(eventType) }
		var err error
		if rw, ok := w.(store.ReadyWaker); ok {
			// The NOTIFYs of the commits before the LISTEN was in place
			// (at start: after discovery's first look; after a
			// reconnect) reached no one: once it is, look for pending
			// types, or such an event waits for the next discovery round
			// or poll.
			err = rw.OutboxListenReady(ctx, wake, r.looks.wantAfterGap)
		} else {
			err = w.OutboxListen(ctx, wake)
		}
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

// A wake-up that names an event type without a poller does not start one
// by itself: a NOTIFY can come from any session of the database, so its
// names are not trusted. It asks for a wake-up look instead: one
// OutboxPendingTypes query, whose types get pollers through the path
// discovery uses (ensurePollers). Looks are coalesced (one pending at a
// time, however many wake-ups ask) and spaced (wakeDiscoverySpacing), so a
// flood of NOTIFYs naming garbage costs at most one cheap query per
// spacing and starts no poller (docs/concepts.md, "Types nobody
// configured").

// wakeDiscoverySpacing is the shortest time between two wake-up looks. It is
// the longest a new type's first event waits for its look after another
// look, well within the second a new type may take.
const wakeDiscoverySpacing = 250 * time.Millisecond

// wakeDiscoveryPatience is how long looks keep following up a named type that
// no look found: an in-process publisher wakes the relay before its
// commit (outbox.Config.OnPublish), when the row is not visible yet. The
// follow-ups come wakeDiscoverySpacing after the look, then twice as far apart
// each time: 6 looks in all for a name no look finds, the last 7.75s
// after the first.
const wakeDiscoveryPatience = 10 * time.Second

// maxWakeNames bounds the named types that looks follow up. A name beyond
// it still gets its look, only no follow-up of its own.
const maxWakeNames = 64

// wakeDiscovery is the relay's queue of wake-up looks: discovery rounds
// that a wake-up asked for.
type wakeDiscovery struct {
	// asked holds one pending look: a wake-up asked for it.
	asked chan struct{}

	mu sync.Mutex
	// names are the types wake-ups named that no look found yet, with
	// when they were first named.
	names map[string]time.Time
	// gap is set by wantAfterGap: the next look also wakes the pollers
	// of the pending types it finds.
	gap bool
}

// wantAfterGap asks for a look after a time in which wake-ups may have
// been lost (the listener was not listening yet, or reconnected): the
// look starts the pollers of new pending types, as any look does, and
// also wakes the pollers of the pending types that have one, whose
// NOTIFY may be among the lost. Idle types are left to their polling.
func (w *wakeDiscovery) wantAfterGap() {
	w.mu.Lock()
	w.gap = true
	w.mu.Unlock()
	w.want("", time.Now())
}

// takeGap reports whether a wantAfterGap is pending, and clears it.
func (w *wakeDiscovery) takeGap() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	g := w.gap
	w.gap = false
	return g
}

func newWakeDiscovery() *wakeDiscovery {
	return &wakeDiscovery{asked: make(chan struct{}, 1), names: make(map[string]time.Time)}
}

// want asks for a look. eventType, when not empty, names the type that
// wake-up was for, which the looks follow up until it has a poller.
func (w *wakeDiscovery) want(eventType string, now time.Time) {
	if eventType != "" {
		w.mu.Lock()
		if _, ok := w.names[eventType]; !ok && len(w.names) < maxWakeNames {
			w.names[eventType] = now
		}
		w.mu.Unlock()
	}
	select {
	case w.asked <- struct{}{}:
	default:
	}
}

// startWakeDiscovery starts the goroutine that runs the wake-up looks.
func (r *Relay) startWakeDiscovery() {
	r.life.Go(r.wakeDiscoveryLoop)
}

// wakeDiscoveryLoop runs a look for each wake-up, at most one per
// wakeDiscoverySpacing, and the follow-ups of the named types no look found,
// until the relay stops.
func (r *Relay) wakeDiscoveryLoop() {
	ctx := r.runCtx
	spacing := time.NewTimer(time.Hour)
	spacing.Stop()
	followUp := time.NewTimer(time.Hour)
	followUp.Stop()
	defer spacing.Stop()
	defer followUp.Stop()
	next := wakeDiscoverySpacing // how long after a look its next follow-up comes
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.looks.asked:
			// A new wake-up: follow up from the shortest wait again.
			next = wakeDiscoverySpacing
		case <-followUp.C:
		}
		followUp.Stop() // Go ≥ 1.23: no stale tick remains after Stop
		r.discoverWoken(ctx)
		spacing.Reset(wakeDiscoverySpacing)
		select {
		case <-ctx.Done():
			return
		case <-spacing.C:
		}
		// Names whose patience ends before the follow-up are dropped now.
		wait := next - wakeDiscoverySpacing
		if r.settleWokenTypes(time.Now().Add(wait)) {
			followUp.Reset(wait)
			next = min(2*next, wakeDiscoveryPatience)
		}
	}
}

// discoverWoken looks for pending types once and starts the pollers that are
// missing, like a discovery round, which it reports as txbox.JobDiscoverWake.
// A failure is logged but does not degrade the relay's health: no later
// look may come to clear it, and discovery finds the types anyway.
func (r *Relay) discoverWoken(ctx context.Context) {
	gap := r.looks.takeGap()
	types, err := r.cfg.Store.OutboxPendingTypes(ctx)
	if ctx.Err() != nil {
		return
	}
	n := 0
	if err == nil {
		if gap {
			r.wakePollers(types)
		}
		n = r.ensurePollers(types)
	} else {
		if gap {
			// Retry at the next look, which a later wake-up or the
			// follow-ups bring; discovery covers the new types anyway.
			r.looks.mu.Lock()
			r.looks.gap = true
			r.looks.mu.Unlock()
		}
		r.log.Warn("wake-up look for new event types failed; the next look or discovery will find them", slog.Any("error", err))
	}
	for _, h := range r.cfg.Hooks {
		h.OnMaintenance(txbox.MaintenanceEvent{Job: txbox.JobDiscoverWake, Count: n, Err: err})
	}
}

// wakePollers wakes the existing pollers of types.
func (r *Relay) wakePollers(types []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, t := range types {
		if p := r.pollers[t]; p != nil {
			p.wake()
		}
	}
}

// settleWokenTypes forgets the named types that have a poller now or were
// named wakeDiscoveryPatience or longer before at, and reports whether some
// remain to follow up. It takes r.mu before the names' lock, as Wake does.
func (r *Relay) settleWokenTypes(at time.Time) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	w := r.looks
	w.mu.Lock()
	defer w.mu.Unlock()
	for t, named := range w.names {
		if _, polled := r.pollers[t]; polled || at.Sub(named) >= wakeDiscoveryPatience {
			delete(w.names, t)
		}
	}
	return len(w.names) > 0
}
