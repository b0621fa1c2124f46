package relay

import "github.com/txbox/txbox/internal/backoff"

// policy is the retry schedule of resolved settings b: the wait before
// retry n (the retry after the n-th failed attempt) is
// Delay × Multiplier^(n-1), capped at Max, then spread by ±Jitter and
// capped at Max again (docs/concepts.md; internal/backoff computes it).
func (b BackoffSettings) policy() backoff.Policy {
	return backoff.Policy{Initial: b.Delay, Multiplier: b.Multiplier, Max: b.Max, Jitter: b.Jitter}
}

// errorBackoff is the wait after database errors in a row: a poller's
// failed claims, the wake-up listener's restarts.
var errorBackoff = backoff.Policy{Initial: DefaultErrorBackoff, Multiplier: 2, Max: DefaultErrorMaxBackoff}
