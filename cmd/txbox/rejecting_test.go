package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	natsgo "github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/health"
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
	testenv.RequireTCP(t, "PostgreSQL", "127.0.0.1:5432")
	testenv.RequireTCP(t, "NATS", strings.TrimPrefix(testenv.NATSURL, "nats://"))
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	pool, err := pgxpool.New(ctx, testenv.PostgresURL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	schema := testenv.UniqueName("rej_")
	if _, err := pool.Exec(ctx, "CREATE SCHEMA "+schema); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+schema+" CASCADE") })
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		http.NotFound(w, r)
	}))
	defer hook.Close()
	subj := testenv.UniqueName("nostream")
	cfgPath := filepath.Join(t.TempDir(), "txbox.yaml")
	yml := fmt.Sprintf(`
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
`, testenv.PostgresURL, schema, testenv.NATSURL, hook.URL, subj)
	if err := os.WriteFile(cfgPath, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := runInProcess(t, nil, "migrate", "--config", cfgPath); code != exitOK {
		t.Fatalf("migrate: %s", errOut)
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	relayErr := &testenv.LogBuffer{}
	done := make(chan int, 1)
	go func() {
		e := &env{stdin: strings.NewReader(""), stdout: io.Discard, stderr: relayErr, getenv: func(string) string { return "" }}
		done <- run(rctx, e, []string{"relay", "--config", cfgPath})
	}()
	readyz := "http://" + waitForLogAddr(t, relayErr, `msg=serving addr=(\S+) paths="?\[/livez`) + "/readyz"
	for _, typ := range []string{"to-nats", "to-hook"} {
		for range 3 {
			if _, err := pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s.txbox_outbox (id, event_type, payload) VALUES ($1, $2, '{}')`, schema), txbox.NewID(), typ); err != nil {
				t.Fatal(err)
			}
		}
	}
	reasons := func() map[string]health.Reason {
		rep, err := getReadyz(ctx, readyz)
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]health.Reason{}
		for _, r := range rep.Reasons {
			if r.Kind == health.ReasonRejecting {
				if rep.Status != health.StatusDegraded {
					t.Errorf("status %q with a rejecting destination, want degraded", rep.Status)
				}
				out[r.Subject] = r
			}
		}
		return out
	}
	var got map[string]health.Reason
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
	nc, err := natsgo.Connect(testenv.NATSURL)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: strings.ToUpper(subj), Subjects: []string{subj + ".>"}, Storage: jetstream.MemoryStorage}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = js.DeleteStream(context.Background(), strings.ToUpper(subj)) })
	testenv.WaitFor(t, 60*time.Second, "the acknowledging subject no longer reported", func() bool {
		got = reasons()
		_, nats := got["to-nats"]
		_, hook := got["to-hook"]
		return !nats && hook
	})
	stop()
	select {
	case code := <-done:
		if code != exitOK {
			t.Fatalf("relay exited %d: %s", code, relayErr)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("relay did not stop within 60s")
	}
}
