package relay

import (
	"testing"
	"time"
)

func TestAdaptivePollingSequence(t *testing.T) {
	t.Parallel()
	s := newPollingDelays(defaultPolling())
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	steps := []struct {
		claimed int
		want    time.Duration
	}{
		{0, ms(250)},    // empty: wait min, then stretch
		{0, ms(375)},    // ×1.5
		{10, ms(562.5)}, // partial counts as not full
		{200, 0},        // full: claim again at once, reset to min
		{200, 0},        // still a backlog
		{199, ms(250)},  // first partial after a full batch waits min
		{0, ms(375)},    //
		{0, ms(562.5)},  //
		{0, ms(843.75)}, //
		{0, ms(1265.625)},
	}
	for i, st := range steps {
		if got := s.next(st.claimed, 200); got != st.want {
			t.Fatalf("step %d (claimed %d): delay %v, want %v", i, st.claimed, got, st.want)
		}
	}
	// Capped at max.
	var last time.Duration
	for range 50 {
		last = s.next(0, 200)
	}
	if last != time.Minute {
		t.Errorf("delay after many empty polls = %v, want the 1m cap", last)
	}
	s.reset()
	if got := s.next(0, 200); got != ms(250) {
		t.Errorf("after reset: %v, want 250ms", got)
	}
}

func TestFixedPolling(t *testing.T) {
	t.Parallel()
	s := newPollingDelays(polling{Mode: PollingFixed, Delay: 2 * time.Second})
	for i, c := range []int{0, 5, 0} {
		if got := s.next(c, 10); got != 2*time.Second {
			t.Errorf("poll %d: %v, want 2s", i, got)
		}
	}
	if got := s.next(10, 10); got != 0 {
		t.Errorf("full batch: %v, want 0", got)
	}
}

func TestIdlePollsPerHour(t *testing.T) {
	t.Parallel()
	// Geometric phase: 250ms×1.5^k until the 1m cap (14 waits, ~145s),
	// then one poll a minute for the rest of the hour: about 70.
	got := IdlePollsPerHour(PollingSettings{})
	if got < 65 || got > 75 {
		t.Errorf("idle polls per hour with defaults = %d, want about 70", got)
	}
	if fixed := IdlePollsPerHour(PollingSettings{Mode: new(PollingFixed)}); fixed != 14400 {
		t.Errorf("fixed 250ms idle polls per hour = %d, want 14400", fixed)
	}
	t.Logf("idle polls per hour: adaptive defaults %d, fixed 250ms %d", got, IdlePollsPerHour(PollingSettings{Mode: new(PollingFixed)}))
}
