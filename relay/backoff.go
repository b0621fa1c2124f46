package relay

import (
	"math"
	"time"
)

// Defaults of the retry backoff settings.
const (
	// DefaultBackoffDelay is the delay before the first retry.
	DefaultBackoffDelay = 10 * time.Second
	// DefaultBackoffMultiplier gives 10s, 30s, 90s.
	DefaultBackoffMultiplier = 3.0
	// DefaultBackoffMax caps one backoff.
	DefaultBackoffMax = time.Hour
)

// BackoffSettings configure the delay before retry n:
// Delay × Multiplier^(n-1), capped by Max, then spread by ±Jitter. Zero
// fields are unset and inherit.
type BackoffSettings struct {
	// Delay before the first retry. Defaults to 10s.
	Delay time.Duration
	// Multiplier per further retry; at least 1. Defaults to 3.0.
	Multiplier float64
	// Max caps one delay. Defaults to 1h.
	Max time.Duration
	// Jitter is the random spread as a fraction in [0, 1]: 0.2 means
	// ±20%. Defaults to 0 (none).
	Jitter float64
}

// delay returns the wait before retry n (n ≥ 1, the retry after the n-th
// failed attempt): Delay × Multiplier^(n-1), computed in floating point so
// large n saturate at Max instead of overflowing, then spread by ±Jitter
// using rnd (a uniform value in [0, 1)) and capped at Max again.
func (b BackoffSettings) delay(n int, rnd func() float64) time.Duration {
	if n < 1 {
		n = 1
	}
	d := float64(b.Delay) * math.Pow(b.Multiplier, float64(n-1))
	if math.IsInf(d, 0) || math.IsNaN(d) || d > float64(b.Max) {
		d = float64(b.Max)
	}
	if b.Jitter > 0 && rnd != nil {
		d *= 1 + b.Jitter*(2*rnd()-1)
		d = math.Min(math.Max(d, 0), float64(b.Max))
	}
	return time.Duration(d)
}
