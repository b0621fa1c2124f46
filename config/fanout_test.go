package config

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/txbox/txbox"
	"github.com/txbox/txbox/internal/testenv"
	"github.com/txbox/txbox/relay"
	"github.com/txbox/txbox/store"
)

// TestFanoutFromYAML: a type fanned out from a file to two webhook routes
// (one of them taking its sender's url) on SQLite: each receiver gets
// every event once, with the same ids and Idempotency-Keys.
func TestFanoutFromYAML(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	got := map[string]map[string]int{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if got[r.URL.Path] == nil {
			got[r.URL.Path] = map[string]int{}
		}
		got[r.URL.Path][r.Header.Get(txbox.HeaderEventID)+" "+r.Header.Get("Idempotency-Key")]++
		mu.Unlock()
	}))
	t.Cleanup(srv.Close)
	yml := fmt.Sprintf(`
database: { dsn: %q }
senders:
  a: { type: webhook, url: "%s/a" }
  b: { type: webhook }
defaults: { sender: a }
events:
  orders:
    routes:
      - { sender: a }
      - { sender: b, url: "%s/b", max-attempts: 2 }
`, filepath.Join(t.TempDir(), "txbox.db"), srv.URL, srv.URL)
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	st := openMigrated(t, c, func(string) string { return "" }, nil)
	senders, err := c.OpenSenders(ctx, func(string) string { return "" }, nil)
	if err != nil {
		t.Fatal(err)
	}
	rc := c.RelayConfig(st, senders, nil)
	if n := len(rc.Events["orders"].Routes); n != 2 {
		t.Fatalf("relay config of orders has %d routes, want 2", n)
	}
	rc.Defaults.Polling = &relay.PollingSettings{MinDelay: new(10 * time.Millisecond), MaxDelay: new(50 * time.Millisecond)}
	r, err := relay.New(rc)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stopAll(t, r, senders) })
	evs := make([]*txbox.Event, 30)
	for i := range evs {
		evs[i] = &txbox.Event{ID: txbox.NewID(), Type: "orders", Payload: []byte("{}")}
	}
	tx, err := st.DB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.OutboxInsert(ctx, tx, &store.OutboxInsertParams{Events: evs}); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	testenv.WaitFor(t, 20*time.Second, "both routes have every event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got["/a"]) == len(evs) && len(got["/b"]) == len(evs)
	})
	mu.Lock()
	defer mu.Unlock()
	for _, ev := range evs {
		k := ev.ID.String() + " " + ev.ID.String()
		if got["/a"][k] != 1 || got["/b"][k] != 1 {
			t.Errorf("event %s: route a got it %d times, route b %d (id and Idempotency-Key both the event id)", ev.ID, got["/a"][k], got["/b"][k])
		}
	}
}

// TestLockConnsCountsEveryRoute: the pool the lock claim needs counts the
// in-flight batches of each lock-claimed route of a fanned-out type.
func TestLockConnsCountsEveryRoute(t *testing.T) {
	t.Parallel()
	yml := `
database: { dialect: postgres, dsn: "postgres://x@127.0.0.1:1/db" }
senders:
  n: { type: nats }
  w: { type: webhook, url: "http://127.0.0.1:1/w" }
defaults: { sender: n, route: { subject: "x.{event_type}" } }
events:
  orders:
    routes:
      - { subject: a, in-flight: 3 }
      - { name: b, subject: b, in-flight: 5 }
      - { sender: w }
  lines:
    in-flight: 6
    routes:
      - { subject: l1, in-flight: 2 }
      - { name: l2, subject: l2, in-flight: 2 }
  keyed:
    in-flight: 7
    routes:
      - { subject: k1, in-flight: 1, ordering: key }
      - { name: k2, subject: k2, in-flight: 1 }
`
	c, err := Load(Source{YAML: []byte(yml)})
	if err != nil {
		t.Fatal(err)
	}
	// orders: two NATS routes in lock mode (3 + 5), the webhook route in
	// lease mode, so its shared claim is by lease; lines: two routes in
	// lock mode (2 + 2) and the shared claim by lock with the type's
	// bound (6); keyed: two routes (1 + 1), no shared claim (a route is
	// ordered); one discovered type with the defaults (4); the reserve.
	if got, want := c.LockConns(), 3+5+2+2+6+1+1+relay.DefaultInFlight+relay.LockReserve; got != want {
		t.Fatalf("LockConns = %d, want %d", got, want)
	}
}
