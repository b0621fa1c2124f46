package relay

import (
	"testing"
	"time"
)

func TestBackoffDefaults(t *testing.T) {
	t.Parallel()
	b := resolvedBackoff{Delay: DefaultBackoffDelay, Multiplier: DefaultBackoffMultiplier, Max: DefaultBackoffMax}
	for n, want := range map[int]time.Duration{1: 10 * time.Second, 2: 30 * time.Second, 3: 90 * time.Second, 4: 270 * time.Second} {
		if got := b.delay(n, nil); got != want {
			t.Errorf("retry %d: %v, want %v", n, got, want)
		}
	}
}

func TestBackoffCapAndOverflow(t *testing.T) {
	t.Parallel()
	b := resolvedBackoff{Delay: time.Second, Multiplier: 10, Max: time.Minute}
	if got := b.delay(3, nil); got != time.Minute {
		t.Errorf("retry 3 (100s) = %v, want cap 1m", got)
	}
	if got := b.delay(10000, nil); got != time.Minute {
		t.Errorf("retry 10000 = %v, want cap 1m (no overflow)", got)
	}
	frac := resolvedBackoff{Delay: 100 * time.Millisecond, Multiplier: 1.5, Max: time.Hour}
	if got := frac.delay(3, nil); got != 225*time.Millisecond {
		t.Errorf("fractional multiplier: %v, want 225ms", got)
	}
}

func TestBackoffJitter(t *testing.T) {
	t.Parallel()
	b := resolvedBackoff{Delay: 10 * time.Second, Multiplier: 3, Max: time.Hour, Jitter: 0.2}
	if got := b.delay(1, func() float64 { return 0 }); got != 8*time.Second {
		t.Errorf("lowest jitter = %v, want 8s", got)
	}
	if got := b.delay(1, func() float64 { return 0.5 }); got != 10*time.Second {
		t.Errorf("middle jitter = %v, want 10s", got)
	}
	if got := b.delay(2, func() float64 { return 0.999999 }); got < 35*time.Second || got > 36*time.Second {
		t.Errorf("highest jitter = %v, want just under 36s", got)
	}
	capped := resolvedBackoff{Delay: time.Minute, Multiplier: 1, Max: time.Minute, Jitter: 0.5}
	if got := capped.delay(1, func() float64 { return 0.99 }); got != time.Minute {
		t.Errorf("jitter above the cap = %v, want the 1m cap", got)
	}
}
