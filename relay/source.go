package relay

import (
	"context"
	"log/slog"

	"github.com/txbox/txbox/internal/startstop"
)

// A source feeds the lanes (relay/lane.go): the table source is a poller
// per type (relay/poller.go), the WAL source the stream
// (relay/stream.go). A source takes a slot and a circuit ticket from a
// type's lane, takes a batch its own way and hands it to the lane's
// dispatch; the lane never asks which source it came from.

// sourceEnv is what a source takes from its relay, and all it takes: its
// lifetime, the relay's logger, a type's settings and lane, and the
// dead-letter mover's wake-up. A source holds no *Relay, so a test builds
// one from fakes (relay/stream_source_test.go).
type sourceEnv struct {
	// life runs the source's goroutines; Stop waits for them. run ends
	// when Stop begins, hard when Stop's context ends.
	life      *startstop.Lifetime
	run, hard context.Context
	log       *slog.Logger
	// settingsFor resolves an event type's settings (Config.Events, then
	// Defaults).
	settingsFor func(eventType string) (*typeSettings, error)
	// routesFor resolves the routes of a fanned-out type, in their
	// order; nil for a type with one route.
	routesFor func(eventType string) ([]*typeSettings, error)
	// newLane makes the lane that delivers a type's batches.
	newLane func(s *typeSettings) *lane
	// deadLettered tells the dead-letter mover that failed rows were
	// written: it moves them now, not at its next round.
	deadLettered func()
}

// sourceEnv is the environment of the relay's sources. Start has begun
// the lifetime.
func (r *Relay) sourceEnv() sourceEnv {
	return sourceEnv{
		life: &r.life, run: r.runCtx, hard: r.hardCtx, log: r.log,
		settingsFor:  r.cfg.settingsFor,
		routesFor:    r.cfg.streamRoutes,
		newLane:      func(s *typeSettings) *lane { return newLane(r.laneDeps(), s) },
		deadLettered: func() { sendTrigger(r.triggers.deadLetter, triggerNow) },
	}
}
