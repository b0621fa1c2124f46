package relay

import (
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/backoff"
	"github.com/txbox/txbox/sender"
)

// TestHorizonBacksOffOnlyWhenNothingWasTaken: a claim that took rows does
// not back off, however many keys the horizon cut (live traffic cuts the
// newest rows of some keys in nearly every claim); one that took nothing
// but rows the horizon held back waits the horizon back-off, doubling, until a claim is
// not cut.
func TestHorizonBacksOffOnlyWhenNothingWasTaken(t *testing.T) {
	p := &poller{horizonCuts: backoff.Streak{Policy: horizonBackoff}}
	pace := time.Second // the polling strategy's delay
	step := func(cut, took int, wantHeld bool, want time.Duration) {
		t.Helper()
		p.horizonCut(cut, took)
		if got := p.horizonHeld(); got != wantHeld {
			t.Errorf("horizonCut(%d, %d): horizonHeld = %v, want %v", cut, took, got, wantHeld)
		}
		if got := p.horizonDelay(pace); got != want {
			t.Errorf("horizonCut(%d, %d): delay %v, want %v", cut, took, got, want)
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
		p.horizonCut(1, 0)
	}
	if got := p.horizonDelay(pace); got != 200*time.Millisecond {
		t.Errorf("after 20 cut claims that took nothing: delay %v, want the 200ms cap", got)
	}
}

// TestDeprecatedOrderingFenceTurnsTheHorizonOff: EventSettings.OrderingFence,
// the former name of CommitHorizon, still turns the commit horizon off
// for one release (docs/upgrading.md), in Defaults and per type, and is
// inherited like CommitHorizon; CommitHorizon wins in the same settings
// only when both agree, else Validate names the deprecated field.
func TestDeprecatedOrderingFenceTurnsTheHorizonOff(t *testing.T) {
	t.Parallel()
	off, on := txbox.CommitHorizonOff, txbox.CommitHorizonOn
	c := &Config{
		Senders:  map[string]sender.Sender{"s": nil},
		Defaults: EventSettings{Ordering: new(txbox.OrderingKey), OrderingFence: &off},
		Events: map[string]EventSettings{
			"own":       {OrderingFence: &on},
			"new-wins":  {CommitHorizon: &on},
			"same-both": {CommitHorizon: &off, OrderingFence: &off},
		},
	}
	if errs := c.Validate(Bounds{}); len(errs) != 0 {
		t.Fatalf("Validate = %v", errs)
	}
	for typ, want := range map[string]bool{"inherits": false, "own": true, "new-wins": true, "same-both": false} {
		s, err := c.settingsFor(typ)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		if s.commitHorizon != want {
			t.Errorf("%s: commit horizon on = %v, want %v", typ, s.commitHorizon, want)
		}
	}
	if s := c.Defaults.Inherit(EventSettings{}); s.CommitHorizon == nil || *s.CommitHorizon != off || s.OrderingFence != nil {
		t.Errorf("Inherit: CommitHorizon %v, OrderingFence %v, want off folded into CommitHorizon", s.CommitHorizon, s.OrderingFence)
	}

	c.Events = map[string]EventSettings{"both": {CommitHorizon: &on, OrderingFence: &off}}
	errs := c.Validate(Bounds{})
	if len(errs) != 1 || errs[0].Field != `Events["both"].OrderingFence` || !strings.Contains(errs[0].Reason, "CommitHorizon") {
		t.Errorf("Validate with both set, different = %v, want one error naming OrderingFence and CommitHorizon", errs)
	}
}
