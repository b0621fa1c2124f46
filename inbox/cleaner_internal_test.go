package inbox

import (
	"testing"
	"time"
)

// TestCleanerDelayGrowth: idle runs multiply the delay up to MaxDelay; the
// sequence with the defaults is 10s, 20s, 40s, … capped at 5m.
func TestCleanerDelayGrowth(t *testing.T) {
	t.Parallel()
	cfg := CleanerConfig{}
	if err := cfg.withDefaults(); err != nil {
		t.Fatal(err)
	}
	c := &Cleaner{cfg: cfg}
	d := cfg.MinDelay
	var seq []time.Duration
	for i := 0; i < 8; i++ {
		d = c.grow(d)
		seq = append(seq, d)
	}
	want := []time.Duration{20 * time.Second, 40 * time.Second, 80 * time.Second, 160 * time.Second, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute, 5 * time.Minute}
	for i := range want {
		if seq[i] != want[i] {
			t.Fatalf("delays = %v, want %v", seq, want)
		}
	}
	// An idle hour at the cap costs about 12 runs (plus the ramp-up).
	if runs := time.Hour / cfg.MaxDelay; runs != 12 {
		t.Errorf("idle runs per hour = %d", runs)
	}
}
