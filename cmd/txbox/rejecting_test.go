package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
)

// TestReadyzReportsARejectingDestination: when a destination refuses
// every message of a type (a NATS subject no stream is bound to, a
// webhook answering 404) for longer than health.reject-threshold, with
// nothing acknowledged, /readyz reports degraded, naming the type, the
// destination and the last error; once the destination acknowledges
// again (the stream is created) the type's reason goes away.
func TestReadyzReportsARejectingDestination(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, schema := postgresSchema(t, ctx, "rej_")
	js := jetStream(t)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.NotFound(w, r)
	}))
	defer hook.Close()
	subj := testenv.UniqueName("nostream")
	rel := startInProcessRelay(t, ctx, fmt.Sprintf(`
database: { dialect: postgres, dsn: %q, schema: %s }
senders:
  bus: { type: nats, url: %q }
  hooks: { type: webhook, url: "%s/missing" }
defaults:
  sender: bus
  polling: { min-delay: 10ms, max-delay: 100ms }
  backoff: { delay: 100ms, multiplier: 1 }
  max-attempts: 1000
events:
  to-nats: { sender: bus, route: { subject: "%s.orders" } }
  to-hook: { sender: hooks }
relay: { shutdown-timeout: 20s }
health: { listen: "127.0.0.1:0", reject-threshold: 1s }
`, testenv.PostgresURL, schema, testenv.NATSURL, hook.URL, subj))
	readyz := rel.readyz
	for _, typ := range []string{"to-nats", "to-hook"} {
		for range 3 {
			if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, $2, '{}')`, schema), txbox.NewID(), typ); err != nil {
				t.Fatal(err)
			}
		}
	}
	reasons := func() map[string]txbox.HealthReason {
		rep, err := getReadyz(ctx, readyz)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]txbox.HealthReason{}
		for _, r := range rep.Reasons {
			if r.Kind == txbox.ReasonRejecting {
				if rep.Status != txbox.HealthDegraded {
					t.Errorf("status %q with a rejecting destination, want degraded", rep.Status)
				}
				out[r.Subject] = r
			}
		}
		return out
	}
	var got map[string]txbox.HealthReason
	testenv.WaitFor(t, 60*time.Second, "/readyz reports both rejecting destinations", func() bool {
		got = reasons()
		return len(got) == 2
	})
	if d := got["to-nats"].Detail; !strings.Contains(d, "bus "+subj+".orders") || !strings.Contains(strings.ToLower(d), "no stream") {
		t.Errorf("to-nats reason %q: want the sender, the subject and the no-stream error", d)
	}
	if d := got["to-hook"].Detail; !strings.Contains(d, "hooks") || !strings.Contains(d, "404") {
		t.Errorf("to-hook reason %q: want the sender and the 404", d)
	}
	t.Logf("reasons: %+v", got)

	// The stream appears: the subject acknowledges, its reason goes.
	memoryStream(t, ctx, js, subj)
	testenv.WaitFor(t, 60*time.Second, "the acknowledging subject no longer reported", func() bool {
		got = reasons()
		_, nats := got["to-nats"]
		_, hook := got["to-hook"]
		return !nats && hook
	})
	rel.stop(t)
}
