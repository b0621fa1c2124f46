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
// Delay × Multiplier^(n-1), capped by Max, then spread by ±Jitter; the yaml
// tags name the keys of docs/configuration.md. A nil field is unset and
// inherits (EventSettings.Inherit); a set zero (Jitter 0) wins.
type BackoffSettings struct {
	// Delay before the first retry. Defaults to 10s.
	Delay *time.Duration `yaml:"delay"`
	// Multiplier per further retry; at least 1. Defaults to 3.0.
	Multiplier *float64 `yaml:"multiplier"`
	// Max caps one delay; at least Delay. Defaults to 1h.
	Max *time.Duration `yaml:"max"`
	// Jitter is the random spread as a fraction in [0, 1]: 0.2 means
	// ±20%. Defaults to 0 (none).
	Jitter *float64 `yaml:"jitter"`
}

// resolvedBackoff is BackoffSettings with every field set, as a poller
// uses it.
type resolvedBackoff struct {
	Delay      time.Duration
	Multiplier float64
	Max        time.Duration
	Jitter     float64
}

// inherit returns b with every unset field taken from parent, or nil when
// both are nil. The result shares no memory with b or parent.
func (b *BackoffSettings) inherit(parent *BackoffSettings) *BackoffSettings {
	if b == nil && parent == nil {
		return nil
	}
	own, par := deref(b), deref(parent)
	return &BackoffSettings{
		Delay: pick(own.Delay, par.Delay), Multiplier: pick(own.Multiplier, par.Multiplier),
		Max: pick(own.Max, par.Max), Jitter: pick(own.Jitter, par.Jitter),
	}
}

// resolved returns the values of b, whose fields must all be set.
func (b *BackoffSettings) resolved() resolvedBackoff {
	return resolvedBackoff{Delay: *b.Delay, Multiplier: *b.Multiplier, Max: *b.Max, Jitter: *b.Jitter}
}

// delay returns the wait before retry n (n ≥ 1, the retry after the n-th
// failed attempt): Delay × Multiplier^(n-1), computed in floating point so
// large n saturate at Max instead of overflowing, then spread by ±Jitter
// using rnd (a uniform value in [0, 1)) and capped at Max again.
func (b resolvedBackoff) delay(n int, rnd func() float64) time.Duration {
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
