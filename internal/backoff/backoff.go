// Package backoff is the one exponential backoff of txbox. Every wait that
// grows after a failure (or an idle round) and shrinks back after a
// success uses it: the relay's retry schedule and its circuits'
// cool-downs, a poller's wait after a database error, the finish retries,
// the cleanup intervals of the relay and the inbox, the PostgreSQL LISTEN
// reconnect, adaptive polling and the consumers' retry delays.
//
// Its two public faces are settings that convert to a [Policy]:
// relay.BackoffSettings (the retry schedule, configuration keys
// backoff.*) and consume.Backoff (the consumer adapters' retry delay, the
// same schedule with the multiplier fixed at 2 and no jitter). Users see
// those; this package is the one place that computes a wait.
//
// The schedule is the one docs/concepts.md gives for retries: the wait
// before retry n is Initial × Multiplier^(n-1), capped at Max, then spread
// by ±Jitter (10s, 30s, 90s with the relay's defaults). It is computed in
// floating point, so a fractional multiplier does not drift and a huge n
// saturates at Max instead of overflowing.
package backoff

import (
	"math"
	"math/rand/v2"
	"time"
)

// Policy is an exponential backoff. Its users check their own settings
// (each names them after its own configuration keys); Policy only assumes
// 0 ≤ Initial ≤ Max, Multiplier ≥ 1 and Jitter in [0, 1]. Whatever the
// values, a wait is never negative, NaN or above Max.
type Policy struct {
	// Initial is the first wait, Delay(1).
	Initial time.Duration
	// Multiplier grows the wait from one step to the next.
	Multiplier float64
	// Max caps every wait, jitter included.
	Max time.Duration
	// Jitter spreads each wait by up to ±Jitter of it (0.2 is ±20%),
	// uniformly; 0 is none.
	Jitter float64
}

// Delay returns the wait of step n (n ≥ 1; a smaller n counts as 1):
// Initial × Multiplier^(n-1), capped at Max, then spread by ±Jitter with
// a fresh random draw and capped at Max again.
func (p Policy) Delay(n int) time.Duration {
	u := 0.5 // the middle of the spread: no jitter
	if p.Jitter > 0 {
		u = rand.Float64()
	}
	return p.DelayAt(n, u)
}

// DelayAt is Delay with the jitter drawn from u, a uniform value in
// [0, 1): 0 is the shortest wait, 0.5 the unspread one. Tests use it to
// pin the spread.
func (p Policy) DelayAt(n int, u float64) time.Duration {
	if n < 1 {
		n = 1
	}
	maxF := float64(p.Max)
	d := float64(p.Initial) * math.Pow(p.Multiplier, float64(n-1))
	if math.IsNaN(d) || d > maxF {
		d = maxF
	}
	if p.Jitter > 0 {
		d *= 1 + p.Jitter*(2*u-1)
	}
	switch {
	case d >= maxF:
		return p.Max
	case !(d > 0): // also NaN
		return 0
	}
	return time.Duration(d)
}

// Streak is a Policy applied to failures in a row: the n-th call of Next
// since the last Reset returns Delay(n). The zero Streak with its Policy
// set is ready to use. A Streak is not safe for concurrent use.
type Streak struct {
	Policy Policy
	n      int
}

// Next counts one more failure and returns its wait.
func (s *Streak) Next() time.Duration {
	if s.n < math.MaxInt {
		s.n++
	}
	return s.Policy.Delay(s.n)
}

// Reset forgets the failures: the next call of Next returns Delay(1).
func (s *Streak) Reset() { s.n = 0 }

// Len is the number of failures since the last Reset.
func (s *Streak) Len() int { return s.n }
