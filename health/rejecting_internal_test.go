package health

import (
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// A type is reported while its destination has refused messages past the
// threshold and still refuses; not before the threshold, not once it went
// idle for a threshold after its last refusal, not when the check is off.
func TestRejectingThresholds(t *testing.T) {
	now := time.Now()
	th := func(since, last time.Duration) relay.Health {
		return relay.Health{Types: []relay.TypeHealth{{EventType: "orders", Sender: "bus", Destination: "orders.created",
			RejectingSince: now.Add(-since), LastRejected: now.Add(-last), LastRejection: "no stream"}}}
	}
	for _, c := range []struct {
		name        string
		h           relay.Health
		threshold   time.Duration
		wantReasons int
	}{
		{"still refusing past the threshold", th(2*time.Minute, time.Second), time.Minute, 1},
		{"refusing, not yet past the threshold", th(30*time.Second, time.Second), time.Minute, 0},
		{"idle since its last refusal", th(5*time.Minute, 2*time.Minute), time.Minute, 0},
		{"check off", th(2*time.Minute, time.Second), -1, 0},
		{"acknowledging", relay.Health{Types: []relay.TypeHealth{{EventType: "orders"}}}, time.Minute, 0},
	} {
		got := rejecting(c.h, c.threshold, now)
		if len(got) != c.wantReasons {
			t.Errorf("%s: %d reasons %+v, want %d", c.name, len(got), got, c.wantReasons)
		}
		for _, r := range got {
			if r.Kind != txbox.ReasonRejecting || r.Subject != "orders" || r.Detail != "bus orders.created has refused every message for 2m0s, none acknowledged; last error: no stream" {
				t.Errorf("%s: reason %+v", c.name, r)
			}
		}
	}
}

// TestFailoverReason: /readyz is degraded, naming every problem, when the
// slot is not failover-safe while the primary has standbys (the verdict
// unsafe); a safe slot, no standby, or a verdict of unknown (the
// standbys could not be read) is no reason.
func TestFailoverReason(t *testing.T) {
	for verdict, want := range map[string]bool{
		store.FailoverUnsafe: true, store.FailoverSafe: false, store.FailoverUnknown: false, store.FailoverNoStandby: false, "": false,
	} {
		h := relay.Health{Stream: &relay.StreamHealth{State: relay.StreamStreaming, Slot: &store.StreamStatus{Slot: "txbox_slot", WALStatus: "reserved",
			Failover: store.StreamFailover{Verdict: verdict, Problems: []string{"synchronized_standby_slots is not set on the primary", "hot_standby_feedback is off"}}}}}
		var got *txbox.HealthReason
		for _, r := range relayReasons(h) {
			if r.Kind == txbox.ReasonFailoverUnsafe {
				got = &r
			}
		}
		if (got != nil) != want {
			t.Errorf("verdict %q: reason %+v", verdict, got)
		}
		if got != nil && (got.Subject != "txbox_slot" || !strings.Contains(got.Detail, "synchronized_standby_slots is not set on the primary; hot_standby_feedback is off")) {
			t.Errorf("verdict %q: reason %+v", verdict, got)
		}
	}
}
