package relay_test

import (
	"context"
	"testing"
	"time"

	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
)

// TestHeartbeat: a running relay keeps a heartbeat row, fresh on the
// database clock, and removes it when it stops gracefully.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ctx := context.Background()
	r := b.start(t, func(c *relay.Config) {
		c.InstanceID = "relay-under-test"
		c.HeartbeatInterval = time.Second
	})
	var seen time.Time
	testenv.WaitFor(t, 30*time.Second, "two heartbeats", func() bool {
		all, err := b.store.InstanceList(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if len(all) != 1 || all[0].ID != "relay-under-test" || all[0].Expired {
			return false
		}
		if seen.IsZero() {
			seen = all[0].SeenAt
			return false
		}
		return all[0].SeenAt.After(seen)
	})
	if err := r.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if all, err := b.store.InstanceList(ctx); err != nil || len(all) != 0 {
		t.Fatalf("after stop: %v, %v; want no heartbeat row", all, err)
	}
}
