package backoff

import (
	"math"
	"testing"
	"time"
)

// retry is the relay's default retry schedule (docs/concepts.md): 10s ×3,
// capped at 1h.
var retry = Policy{Initial: 10 * time.Second, Multiplier: 3, Max: time.Hour}

func TestDelaySchedule(t *testing.T) {
	t.Parallel()
	for n, want := range map[int]time.Duration{
		-5: 10 * time.Second, 0: 10 * time.Second, // below 1 counts as 1
		1: 10 * time.Second, 2: 30 * time.Second, 3: 90 * time.Second, 4: 270 * time.Second,
		5: 810 * time.Second, 6: 2430 * time.Second, 7: time.Hour, 8: time.Hour,
	} {
		if got := retry.Delay(n); got != want {
			t.Errorf("Delay(%d) = %v, want %v", n, got, want)
		}
	}
}

func TestDelayCapAndOverflow(t *testing.T) {
	t.Parallel()
	p := Policy{Initial: time.Second, Multiplier: 10, Max: time.Minute}
	if got := p.Delay(3); got != time.Minute {
		t.Errorf("Delay(3) (100s) = %v, want the 1m cap", got)
	}
	for _, n := range []int{64, 10000, math.MaxInt32, math.MaxInt} {
		if got := p.Delay(n); got != time.Minute {
			t.Errorf("Delay(%d) = %v, want the 1m cap (no overflow)", n, got)
		}
	}
	// The largest cap there is: the product overflows float64 to +Inf,
	// and the wait is still exactly Max.
	huge := Policy{Initial: time.Hour, Multiplier: 2, Max: math.MaxInt64}
	if got := huge.Delay(math.MaxInt); got != math.MaxInt64 {
		t.Errorf("Delay(MaxInt) with Max = MaxInt64: %v, want MaxInt64", got)
	}
	frac := Policy{Initial: 100 * time.Millisecond, Multiplier: 1.5, Max: time.Hour}
	if got := frac.Delay(3); got != 225*time.Millisecond {
		t.Errorf("fractional multiplier: Delay(3) = %v, want 225ms", got)
	}
	flat := Policy{Initial: time.Second, Multiplier: 1, Max: time.Minute}
	if got := flat.Delay(math.MaxInt); got != time.Second {
		t.Errorf("multiplier 1: Delay(MaxInt) = %v, want 1s", got)
	}
}

func TestDelayOddValues(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		p    Policy
		want time.Duration
	}{
		{"zero policy", Policy{}, 0},
		{"initial above max", Policy{Initial: time.Hour, Multiplier: 2, Max: time.Second}, time.Second},
		{"negative initial", Policy{Initial: -time.Second, Multiplier: 2, Max: time.Second}, 0},
		{"NaN multiplier", Policy{Initial: time.Second, Multiplier: math.NaN(), Max: time.Minute}, time.Minute},
		{"infinite multiplier", Policy{Initial: time.Second, Multiplier: math.Inf(1), Max: time.Minute}, time.Minute},
		{"zero initial, infinite multiplier", Policy{Multiplier: math.Inf(1), Max: time.Minute}, time.Minute},
	} {
		if got := tc.p.Delay(5); got != tc.want {
			t.Errorf("%s: Delay(5) = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestDelayJitter(t *testing.T) {
	t.Parallel()
	p := Policy{Initial: 10 * time.Second, Multiplier: 3, Max: time.Hour, Jitter: 0.2}
	if got := p.DelayAt(1, 0); got != 8*time.Second {
		t.Errorf("lowest jitter = %v, want 8s", got)
	}
	if got := p.DelayAt(1, 0.5); got != 10*time.Second {
		t.Errorf("middle jitter = %v, want 10s", got)
	}
	if got := p.DelayAt(2, 0.999999); got < 35*time.Second || got >= 36*time.Second {
		t.Errorf("highest jitter = %v, want just under 36s", got)
	}
	// Random draws stay within ±20% and are spread (not all the same).
	seen := map[time.Duration]bool{}
	for range 1000 {
		d := p.Delay(2)
		if d < 24*time.Second || d >= 36*time.Second {
			t.Fatalf("Delay(2) with ±20%% = %v, want in [24s, 36s)", d)
		}
		seen[d] = true
	}
	if len(seen) < 100 {
		t.Errorf("1000 jittered delays took only %d values", len(seen))
	}
	// Jitter never lifts a wait above the cap: at the cap only the lower
	// half of the spread is left.
	capped := Policy{Initial: time.Minute, Multiplier: 1, Max: time.Minute, Jitter: 0.5}
	if got := capped.DelayAt(1, 0.99); got != time.Minute {
		t.Errorf("jitter above the cap = %v, want the 1m cap", got)
	}
	if got := capped.DelayAt(1, 0); got != 30*time.Second {
		t.Errorf("lowest jitter at the cap = %v, want 30s", got)
	}
	for range 1000 {
		if d := capped.Delay(math.MaxInt); d < 30*time.Second || d > time.Minute {
			t.Fatalf("jittered capped Delay = %v, want in [30s, 1m]", d)
		}
	}
	// Full jitter reaches zero, never below.
	full := Policy{Initial: time.Second, Multiplier: 2, Max: time.Minute, Jitter: 1}
	if got := full.DelayAt(1, 0); got != 0 {
		t.Errorf("full jitter, lowest = %v, want 0", got)
	}
	// Without jitter Delay draws nothing: the same value every time.
	if a, b := retry.Delay(3), retry.Delay(3); a != b || a != 90*time.Second {
		t.Errorf("unjittered Delay(3) = %v then %v, want 90s twice", a, b)
	}
}

func TestStreak(t *testing.T) {
	t.Parallel()
	s := Streak{Policy: Policy{Initial: 100 * time.Millisecond, Multiplier: 2, Max: time.Second}}
	var got []time.Duration
	for range 6 {
		got = append(got, s.Next())
	}
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, time.Second, time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("Next #%d = %v, want %v (all: %v)", i+1, got[i], want[i], got)
		}
	}
	if s.Len() != 6 {
		t.Errorf("Len = %d, want 6", s.Len())
	}
	s.Reset()
	if s.Len() != 0 {
		t.Errorf("Len after Reset = %d, want 0", s.Len())
	}
	if d := s.Next(); d != 100*time.Millisecond {
		t.Errorf("Next after Reset = %v, want 100ms", d)
	}
	// A streak that would run past MaxInt stays at the cap.
	s.n = math.MaxInt
	if d := s.Next(); d != time.Second || s.Len() != math.MaxInt {
		t.Errorf("Next at MaxInt = %v (Len %d), want 1s at MaxInt", d, s.Len())
	}
}

// TestSameAsTheFormulasItReplaced checks Policy against each hand-written
// backoff it replaced, copied here as it was, over their defaults and
// other settings with integer multipliers (where step-by-step products
// are exact, so the old forms and the closed form must agree to the
// nanosecond).
func TestSameAsTheFormulasItReplaced(t *testing.T) {
	t.Parallel()
	ms := time.Millisecond
	// relay.BackoffSettings.delay (retries): the closed form.
	relayRetry := func(delay time.Duration, mult float64, maxD time.Duration, n int) time.Duration {
		d := float64(delay) * math.Pow(mult, float64(max(n, 1)-1))
		if math.IsInf(d, 0) || math.IsNaN(d) || d > float64(maxD) {
			d = float64(maxD)
		}
		return time.Duration(d)
	}
	// consume.Backoff.Delay: Min doubled per failure, capped at Max.
	consumeDelay := func(minD, maxD time.Duration, attempt int) time.Duration {
		d := minD
		for i := 1; i < attempt && d < maxD; i++ {
			d *= 2
		}
		return min(d, maxD)
	}
	// The poller's claim error backoff: a shift, capped.
	pollerErr := func(streak int) time.Duration {
		return min(100*ms<<min(streak-1, 16), 10*time.Second)
	}
	// Step-by-step growth: the circuit's cool-down, the inbox cleaner,
	// the relay's cleanup interval and both LISTEN reconnects.
	steps := func(first time.Duration, mult float64, maxD time.Duration, n int) time.Duration {
		d := first
		for i := 1; i < n; i++ {
			next := time.Duration(float64(d) * mult)
			if next > maxD || next < d {
				next = maxD
			}
			d = next
		}
		return d
	}
	for n := 1; n <= 200; n++ {
		for _, c := range []struct {
			name     string
			got, old time.Duration
		}{
			{"relay retry defaults", retry.Delay(n), relayRetry(10*time.Second, 3, time.Hour, n)},
			{"relay retry 1s ×10", Policy{Initial: time.Second, Multiplier: 10, Max: time.Minute}.Delay(n), relayRetry(time.Second, 10, time.Minute, n)},
			{"relay retry 100ms ×1.5", Policy{Initial: 100 * ms, Multiplier: 1.5, Max: time.Hour}.Delay(n), relayRetry(100*ms, 1.5, time.Hour, n)},
			{"consume defaults", Policy{Initial: 100 * ms, Multiplier: 2, Max: 30 * time.Second}.Delay(n), consumeDelay(100*ms, 30*time.Second, n)},
			{"consume 5ms..20ms", Policy{Initial: 5 * ms, Multiplier: 2, Max: 20 * ms}.Delay(n), consumeDelay(5*ms, 20*ms, n)},
			{"consume 7ms..1h", Policy{Initial: 7 * ms, Multiplier: 2, Max: time.Hour}.Delay(n), consumeDelay(7*ms, time.Hour, n)},
			{"poller error", Policy{Initial: 100 * ms, Multiplier: 2, Max: 10 * time.Second}.Delay(n), pollerErr(n)},
			{"circuit defaults", Policy{Initial: time.Second, Multiplier: 2, Max: time.Minute}.Delay(n), steps(time.Second, 2, time.Minute, n)},
			{"circuit 50ms ×3", Policy{Initial: 50 * ms, Multiplier: 3, Max: time.Hour}.Delay(n), steps(50*ms, 3, time.Hour, n)},
			{"cleanup 1m..10m", Policy{Initial: time.Minute, Multiplier: 2, Max: 10 * time.Minute}.Delay(n), steps(time.Minute, 2, 10*time.Minute, n)},
			{"cleanup 1m..1000h", Policy{Initial: time.Minute, Multiplier: 2, Max: 1000 * time.Hour}.Delay(n), steps(time.Minute, 2, 1000*time.Hour, n)},
			{"finish retries", Policy{Initial: 50 * ms, Multiplier: 4, Max: 800 * ms}.Delay(min(n, 3)), steps(50*ms, 4, 800*ms, min(n, 3))},
		} {
			if c.got != c.old {
				t.Fatalf("%s, step %d: %v, the old formula gave %v", c.name, n, c.got, c.old)
			}
		}
	}
}
