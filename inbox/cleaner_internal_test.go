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
	if d := c.idleDelay(0); d != cfg.MinDelay {
		t.Errorf("delay after a run that deleted rows = %v, want MinDelay %v", d, cfg.MinDelay)
	}
	var seq []time.Duration
	for idle := 1; idle <= 8; idle++ {
		seq = append(seq, c.idleDelay(idle))
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
