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
		o    roundOutcome
		want time.Duration
	}{
		{roundIdle, 10 * time.Second},
		{roundIdle, 20 * time.Second},
		{roundIdle, 40 * time.Second},
		{roundIdle, time.Minute},
		{roundIdle, time.Minute},
		{roundBusy, 5 * time.Second}, // found work: back to the shortest interval
		{roundIdle, 10 * time.Second},
		{roundIdle, 20 * time.Second},
		// A failure is retried within a second, then sooner than the
		// interval while it keeps failing, never later than it.
		{roundFailed, time.Second},
		{roundFailed, 2 * time.Second},
		{roundFailed, 4 * time.Second},
		{roundFailed, 5 * time.Second},
		{roundIdle, 10 * time.Second}, // recovered: the idle back-off starts over
		{roundFailed, time.Second},
		{roundBusy, 5 * time.Second},
	}
	for i, st := range steps {
		if got := s.after(st.o); got != st.want {
			t.Fatalf("step %d (outcome %v): wait %v, want %v", i, st.o, got, st.want)
		}
	}
	for i := range 1000 {
		if got := s.after(roundIdle); i >= 3 && got != time.Minute {
			t.Fatalf("after many idle rounds: wait %v, want the cap 1m", got)
		}
	}
	// A cap below the interval is the interval: a fixed schedule.
	if got := newJobSchedule(time.Minute, time.Second).after(roundIdle); got != time.Minute {
		t.Errorf("cap below interval: wait %v, want 1m", got)
	}
	// The heartbeat (2m, fixed) retries a failed beat within seconds.
	hb := newJobSchedule(2*time.Minute, 2*time.Minute)
	if got := hb.after(roundFailed); got != time.Second {
		t.Errorf("heartbeat after a failure: wait %v, want 1s", got)
	}
	// A job whose interval is shorter than the retry delay retries at
	// its interval.
	if got := newJobSchedule(100*time.Millisecond, time.Second).after(roundFailed); got != 100*time.Millisecond {
		t.Errorf("short interval after a failure: wait %v, want 100ms", got)
	}
}

func TestSendTriggerCoalesces(t *testing.T) {
	t.Parallel()
	ch := make(chan jobTrigger, 1)
	sendTrigger(ch, triggerSoon)
	sendTrigger(ch, triggerSoon) // does not block
	sendTrigger(ch, triggerNow)  // replaces the pending triggerSoon
	sendTrigger(ch, triggerSoon) // does not downgrade it
	if k := <-ch; k != triggerNow {
		t.Fatalf("pending trigger = %v, want triggerNow", k)
	}
	select {
	case k := <-ch:
		t.Fatalf("a second trigger %v is pending; triggers should coalesce into one", k)
	default:
	}
}
