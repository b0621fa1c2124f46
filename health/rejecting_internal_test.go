package health

import (
	"testing"
	"time"

	"github.com/txbox/txbox/relay"
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
			if r.Kind != ReasonRejecting || r.Subject != "orders" || r.Detail != "bus orders.created has refused every message for 2m0s, none acknowledged; last error: no stream" {
				t.Errorf("%s: reason %+v", c.name, r)
			}
		}
	}
}
