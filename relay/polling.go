package relay

import (
	"time"

	"github.com/txbox/txbox/internal/backoff"
)

// Defaults of the polling settings.
const (
	// DefaultPollingMode is adaptive polling.
	DefaultPollingMode = PollingAdaptive
	// DefaultPollingMinDelay is the adaptive delay after a full batch.
	DefaultPollingMinDelay = 250 * time.Millisecond
	// DefaultPollingMaxDelay caps the adaptive delay: the worst pickup wait
	// of an idle type without wake-ups.
	DefaultPollingMaxDelay = time.Minute
	// DefaultPollingMultiplier stretches the adaptive delay after a partial
	// or empty batch.
	DefaultPollingMultiplier = 1.5
	// DefaultPollingDelay is the delay of fixed polling.
	DefaultPollingDelay = 250 * time.Millisecond
)

// Polling modes.
const (
	// PollingAdaptive resets to MinDelay after a full batch and multiplies
	// the delay by Multiplier (capped by MaxDelay) otherwise.
	PollingAdaptive = "adaptive"
	// PollingFixed waits Delay between polls.
	PollingFixed = "fixed"
)

// PollingSettings configure how a poller waits between claims. A nil
// field is unset and inherits (EventSettings.Inherit).
type PollingSettings struct {
	// Mode is "adaptive" or "fixed". Defaults to adaptive.
	Mode *string
	// MinDelay is the adaptive delay after a full batch. Defaults to 250ms.
	MinDelay *time.Duration
	// Multiplier stretches the adaptive delay after a partial or empty
	// batch; at least 1. Defaults to 1.5.
	Multiplier *float64
	// MaxDelay caps the adaptive delay; at least MinDelay. Defaults to 1m.
	MaxDelay *time.Duration
	// Delay is the fixed delay. Defaults to 250ms.
	Delay *time.Duration
}

// polling is PollingSettings with every field set, as a poller
// uses it.
type polling struct {
	Mode               string
	MinDelay, MaxDelay time.Duration
	Multiplier         float64
	Delay              time.Duration
}

// inherit returns p with every unset field taken from parent, or nil when
// both are nil. The result shares no memory with p or parent.
func (p *PollingSettings) inherit(parent *PollingSettings) *PollingSettings {
	if p == nil && parent == nil {
		return nil
	}
	own, par := deref(p), deref(parent)
	return &PollingSettings{
		Mode: pick(own.Mode, par.Mode), MinDelay: pick(own.MinDelay, par.MinDelay), MaxDelay: pick(own.MaxDelay, par.MaxDelay),
		Multiplier: pick(own.Multiplier, par.Multiplier), Delay: pick(own.Delay, par.Delay),
	}
}

// resolved returns the values of p, whose fields must all be set.
func (p *PollingSettings) resolved() polling {
	return polling{Mode: *p.Mode, MinDelay: *p.MinDelay, MaxDelay: *p.MaxDelay, Multiplier: *p.Multiplier, Delay: *p.Delay}
}

func defaultPollingSettings() *PollingSettings {
	return &PollingSettings{
		Mode: new(DefaultPollingMode), MinDelay: new(DefaultPollingMinDelay), MaxDelay: new(DefaultPollingMaxDelay),
		Multiplier: new(DefaultPollingMultiplier), Delay: new(DefaultPollingDelay),
	}
}

func defaultPolling() polling { return defaultPollingSettings().resolved() }

// pollingDelays chooses the wait before the next claim of one event type
// from the outcome of the last one. Implementations are pure and not safe
// for concurrent use; each poller owns one.
type pollingDelays interface {
	// next returns the delay before the next claim after a claim that
	// returned claimed rows out of limit.
	next(claimed, limit int) time.Duration
	// reset forgets the history, as after a wake-up.
	reset()
}

// newPollingDelays returns the delays for resolved settings p.
func newPollingDelays(p polling) pollingDelays {
	if p.Mode == PollingFixed {
		return &fixedPolling{delay: p.Delay}
	}
	return &adaptivePolling{idle: backoff.Streak{Policy: backoff.Policy{Initial: p.MinDelay, Multiplier: p.Multiplier, Max: p.MaxDelay}}}
}

// adaptivePolling implements the adaptive mode of docs/configuration.md
// (polling). A full batch means a backlog: the next claim happens at once
// (the in-flight limit bounds how far ahead the poller runs) and the
// delay resets to min, so the first partial or empty batch after it waits
// min. Each further partial or empty batch multiplies
// the delay by mult, capped at max. Claiming again at once after a full
// batch instead of waiting min is deliberate: waiting 250ms after every
// 200-row batch would cap a drain at 800 events/s.
type adaptivePolling struct {
	// idle counts the partial or empty batches since the last full one
	// (or reset): the n-th waits min × mult^(n-1), capped at max.
	idle backoff.Streak
}

func (a *adaptivePolling) next(claimed, limit int) time.Duration {
	if claimed >= limit {
		a.idle.Reset()
		return 0
	}
	return a.idle.Next()
}

func (a *adaptivePolling) reset() { a.idle.Reset() }

// fixedPolling waits the same delay after every partial or empty batch and
// claims again at once after a full one.
type fixedPolling struct{ delay time.Duration }

func (f *fixedPolling) next(claimed, limit int) time.Duration {
	if claimed >= limit {
		return 0
	}
	return f.delay
}

func (f *fixedPolling) reset() {}

// IdlePollsPerHour returns how many claims an event type with no events
// makes in its first hour (polls at t < 1h) under polling settings p (unset
// fields take the defaults), counting the immediate first poll. With the defaults it is
// about 70, against 14,400 for a fixed 250ms poll.
func IdlePollsPerHour(p PollingSettings) int {
	s := newPollingDelays(p.inherit(defaultPollingSettings()).resolved())
	var elapsed time.Duration
	n := 1 // the first poll happens at Start
	for {
		elapsed += s.next(0, 1)
		if elapsed >= time.Hour {
			return n
		}
		n++
	}
}

// wakeFollowUps are the delays of the extra polls after a wake-up that
// found nothing. In-process publishers wake the relay from inside the
// transaction, before it commits (outbox.Config.OnPublish), so the first
// poll often comes too early; the commit follows within milliseconds, and
// these polls pick it up without waiting for the adaptive delay.
var wakeFollowUps = []time.Duration{2 * time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond}

// pollingState chooses the poller's wait between claims: the delays,
// and the follow-up polls after a wake-up.
type pollingState struct {
	strategy pollingDelays
	// ordered is true for a type delivered in key order.
	ordered   bool
	followUps []time.Duration
}

// woken starts over after a wake-up, with the follow-up polls.
func (pc *pollingState) woken() {
	pc.strategy.reset()
	pc.followUps = wakeFollowUps
}

// next returns the wait after a claim that returned claimed rows of
// limit.
func (pc *pollingState) next(claimed, limit int) time.Duration {
	delay := pc.strategy.next(claimed, limit)
	if pc.ordered && claimed > 0 && claimed < limit {
		// Limited by keys in flight, not idle: wait no longer than
		// min-delay, and claim at once when a batch finishes (batchDone).
		pc.strategy.reset()
		delay = pc.strategy.next(0, limit)
	}
	if claimed == 0 && len(pc.followUps) > 0 {
		delay = min(delay, pc.followUps[0])
		pc.followUps = pc.followUps[1:]
	} else if claimed > 0 {
		pc.followUps = nil
	}
	return delay
}
