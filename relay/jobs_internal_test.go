package relay

import (
	"testing"
	"time"
)

// The schedule of a background job: the shortest interval after a busy
// round, doubling per idle round in a row, never above the cap. The cap is
// what bounds how late a lease that expired while recovery was backed off
// is recovered (docs/concepts.md, "Background jobs").
func TestJobScheduleBacksOffToItsCap(t *testing.T) {
	t.Parallel()
	s := newJobSchedule(5*time.Second, time.Minute)
	steps := []struct {
		busy bool
		want time.Duration
	}{
		{false, 10 * time.Second},
		{false, 20 * time.Second},
		{false, 40 * time.Second},
		{false, time.Minute},
		{false, time.Minute},
		{true, 5 * time.Second}, // found work: back to the shortest interval
		{false, 10 * time.Second},
	}
	for i, st := range steps {
		if got := s.after(st.busy); got != st.want {
			t.Fatalf("step %d (busy %v): wait %v, want %v", i, st.busy, got, st.want)
		}
	}
	for i := range 1000 {
		if got := s.after(false); i >= 2 && got != time.Minute {
			t.Fatalf("after many idle rounds: wait %v, want the cap 1m", got)
		}
	}
	// A cap below the interval is the interval: a fixed schedule.
	if got := newJobSchedule(time.Minute, time.Second).after(false); got != time.Minute {
		t.Errorf("cap below interval: wait %v, want 1m", got)
	}
}

func TestSendKickCoalesces(t *testing.T) {
	t.Parallel()
	ch := make(chan kick, 1)
	sendKick(ch, kickSoon)
	sendKick(ch, kickSoon) // does not block
	sendKick(ch, kickNow)  // replaces the pending kickSoon
	sendKick(ch, kickSoon) // does not downgrade it
	if k := <-ch; k != kickNow {
		t.Fatalf("pending kick = %v, want kickNow", k)
	}
	select {
	case k := <-ch:
		t.Fatalf("a second kick %v is pending; kicks should coalesce into one", k)
	default:
	}
}
