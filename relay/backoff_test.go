package relay

import (
	"testing"
	"time"
)

// The schedule itself (cap, overflow, jitter bounds) is tested in
// internal/backoff; these tests check that the settings map onto it.

func TestBackoffDefaults(t *testing.T) {
	t.Parallel()
	b := resolvedBackoff{Delay: DefaultBackoffDelay, Multiplier: DefaultBackoffMultiplier, Max: DefaultBackoffMax}.policy()
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 30 * time.Second, 3: 90 * time.Second, 4: 270 * time.Second} {
		if got := b.Delay(n); got != want {
			t.Errorf("retry %d: %v, want %v", n, got, want)
		}
	}
}

func TestBackoffCapAndOverflow(t *testing.T) {
	t.Parallel()
	b := resolvedBackoff{Delay: time.Second, Multiplier: 10, Max: time.Minute}.policy()
	if got := b.Delay(3); got != time.Minute {
		t.Errorf("retry 3 (100s) = %v, want cap 1m", got)
	}
	if got := b.Delay(10000); got != time.Minute {
		t.Errorf("retry 10000 = %v, want cap 1m (no overflow)", got)
	}
	frac := resolvedBackoff{Delay: 100 * time.Millisecond, Multiplier: 1.5, Max: time.Hour}.policy()
	if got := frac.Delay(3); got != 225*time.Millisecond {
		t.Errorf("fractional multiplier: %v, want 225ms", got)
	}
}

func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	b := resolvedBackoff{Delay: 10 * time.Second, Multiplier: 3, Max: time.Hour, Jitter: 0.2}.policy()
	if got := b.DelayAt(1, 0); got != 8*time.Second {
		t.Errorf("lowest jitter = %v, want 8s", got)
	}
	if got := b.DelayAt(1, 0.5); got != 10*time.Second {
		t.Errorf("middle jitter = %v, want 10s", got)
	}
	if got := b.DelayAt(2, 0.999999); got < 35*time.Second || got > 36*time.Second {
		t.Errorf("highest jitter = %v, want just under 36s", got)
	}
	capped := resolvedBackoff{Delay: time.Minute, Multiplier: 1, Max: time.Minute, Jitter: 0.5}.policy()
	if got := capped.DelayAt(1, 0.99); got != time.Minute {
		t.Errorf("jitter above the cap = %v, want the 1m cap", got)
	}
}

func TestErrorBackoff(t *testing.T) {
	t.Parallel()
	// 100ms doubling up to 10s: the waits after failed claims in a row.
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond,
		1600 * time.Millisecond, 3200 * time.Millisecond, 6400 * time.Millisecond, 10 * time.Second, 10 * time.Second}
	for i, w := range want {
		if got := errorBackoff.Delay(i + 1); got != w {
			t.Errorf("error %d: %v, want %v", i+1, got, w)
		}
	}
}
