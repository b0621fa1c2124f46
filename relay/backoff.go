package relay

import (
	"math"
	"time"
)

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
