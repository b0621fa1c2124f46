package relay

import (
	"testing"
	"time"

	"github.com/txbox/txbox/internal/backoff"
)

// TestFenceBacksOffOnlyWhenNothingWasTaken: a claim that took rows does
// not back off, however many keys the fence cut (live traffic cuts the
// newest rows of some keys in nearly every claim); one that took nothing
// but fenced rows waits the fence back-off, doubling, until a claim is
// not cut.
func TestFenceBacksOffOnlyWhenNothingWasTaken(t *testing.T) {
	p := &poller{fenceCuts: backoff.Streak{Policy: fenceBackoff}}
	pace := time.Second // the polling strategy's delay
	step := func(cut, took int, wantHeld bool, want time.Duration) {
		t.Helper()
		p.fenceCut(cut, took)
		if got := p.fenceHeld(); got != wantHeld {
			t.Errorf("fenceCut(%d, %d): fenceHeld = %v, want %v", cut, took, got, wantHeld)
		}
		if got := p.fenceDelay(pace); got != want {
			t.Errorf("fenceCut(%d, %d): delay %v, want %v", cut, took, got, want)
		}
	}
	step(3, 10, false, pace)
	step(3, 0, true, 5*time.Millisecond)
	step(3, 0, true, 10*time.Millisecond)
	step(3, 0, true, 20*time.Millisecond)
	step(5, 1, false, pace) // rows taken: the keys move
	step(2, 0, true, 5*time.Millisecond)
	step(0, 0, false, pace) // nothing cut: an idle type paces as usual
	for range 20 {
		p.fenceCut(1, 0)
	}
	if got := p.fenceDelay(pace); got != 200*time.Millisecond {
		t.Errorf("after 20 cut claims that took nothing: delay %v, want the 200ms cap", got)
	}
}
