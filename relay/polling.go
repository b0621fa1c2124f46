package relay

import (
	"time"

	"github.com/txbox/txbox/internal/backoff"
)

// pollStrategy chooses the wait before the next claim of one event type
// from the outcome of the last one. Implementations are pure and not safe
// for concurrent use; each poller owns one.
type pollStrategy interface {
	// next returns the delay before the next claim after a claim that
	// returned claimed rows out of limit.
	next(claimed, limit int) time.Duration
	// reset forgets the history, as after a wake-up.
	reset()
}

// newPollStrategy returns the strategy for resolved settings p.
func newPollStrategy(p PollingSettings) pollStrategy {
	if p.Mode == PollingFixed {
		return &fixedPolling{delay: p.Delay}
	}
	return &adaptivePolling{idle: backoff.Streak{Policy: backoff.Policy{Initial: p.MinDelay, Multiplier: p.Multiplier, Max: p.MaxDelay}}}
}

// adaptivePolling implements SPEC §4.3. A full batch means a backlog: the
// next claim happens at once (the in-flight limit bounds how far ahead the
// poller runs) and the delay resets to min, so the first partial or empty
// batch after it waits min. Each further partial or empty batch multiplies
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
// makes in its first hour (polls at t < 1h) under polling settings p (zero fields take the
// defaults), counting the immediate first poll. With the defaults it is
// about 70, against 14,400 for a fixed 250ms poll.
func IdlePollsPerHour(p PollingSettings) int {
	s := newPollStrategy(mergePolling(p))
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

func mergePolling(p PollingSettings) PollingSettings {
	return overlayPolling(defaultPolling(), p)
}

func defaultPolling() PollingSettings {
	return PollingSettings{
		Mode: DefaultPollingMode, MinDelay: DefaultPollingMinDelay, MaxDelay: DefaultPollingMaxDelay,
		Multiplier: DefaultPollingMultiplier, Delay: DefaultPollingDelay,
	}
}

// overlayPolling returns base with every set (non-zero) field of p.
func overlayPolling(base, p PollingSettings) PollingSettings {
	if p.Mode != "" {
		base.Mode = p.Mode
	}
	if p.MinDelay != 0 {
		base.MinDelay = p.MinDelay
	}
	if p.MaxDelay != 0 {
		base.MaxDelay = p.MaxDelay
	}
	if p.Multiplier != 0 {
		base.Multiplier = p.Multiplier
	}
	if p.Delay != 0 {
		base.Delay = p.Delay
	}
	return base
}
